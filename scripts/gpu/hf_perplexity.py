#!/usr/bin/env python3
"""Sliding-window perplexity of a text with transformers: the reference for xserv-perplexity.

Same tokenization as our router's /tokenize (the model directory's tokenizer.json, no special
tokens added: our Tokenizer::Encode never applies the post-processor) and the same windows as
tools/perplexity/perplexity.cc (HF's perplexity-guide recipe): windows of at most --max-length
tokens advancing by --stride, each scoring only the positions the previous window did not reach,
with everything before them in the window as context; position 0 is never scored. Log-probs come
from the model's logits (bf16 by default, as served) taken to fp32 before log_softmax, and the NLL
is summed exactly per token (no mean-times-length approximation).

Usage: python3 hf_perplexity.py --model DIR --file TEXT [--max-length 1024 --stride 512]
                                [--max-tokens N] [--dtype bf16|fp32] [--out JSON] [--ids-out JSON]
Prints one JSON object: {"perplexity", "mean_nll", "nll_sum", "tokens", "tokens_scored", ...}.
"""
import argparse
import json
import math
import time
from pathlib import Path

import torch


def encode(model_dir: Path, text: str):
    """Token ids of `text` without special tokens, from the model dir's tokenizer.json."""
    try:
        from tokenizers import Tokenizer
        tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        return tok.encode(text, add_special_tokens=False).ids, "tokenizers"
    except ImportError:
        from transformers import AutoTokenizer
        tok = AutoTokenizer.from_pretrained(str(model_dir))
        return tok(text, add_special_tokens=False)["input_ids"], "transformers"


def sliding_windows(num_tokens: int, max_length: int, stride: int):
    """Mirrors xserv::tools::SlidingWindows: (begin, end, score_begin) triples."""
    if max_length < 2 or stride < 1 or stride > max_length:
        raise ValueError("need max_length >= 2 and 1 <= stride <= max_length")
    windows = []
    previous_end = 1  # position 0 has no context
    begin = 0
    while previous_end < num_tokens:
        end = min(begin + max_length, num_tokens)
        windows.append((begin, end, max(previous_end, begin + 1)))
        previous_end = end
        begin += stride
    return windows


def load_model(model_dir: Path, dtype):
    from transformers import AutoModelForCausalLM
    try:
        model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=dtype)
    except TypeError:  # transformers before the `dtype` argument
        model = AutoModelForCausalLM.from_pretrained(str(model_dir), torch_dtype=dtype)
    return model.cuda().eval()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", type=Path, required=True)
    ap.add_argument("--file", type=Path, required=True)
    ap.add_argument("--max-length", type=int, default=1024)
    ap.add_argument("--stride", type=int, default=512)
    ap.add_argument("--max-tokens", type=int, default=0, help="score only the first N (0: all)")
    ap.add_argument("--dtype", choices=["bf16", "fp32"], default="bf16")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--ids-out", type=Path, help="write the token ids here (JSON list)")
    args = ap.parse_args()

    text = args.file.read_bytes().decode("utf-8")
    ids, tokenizer_impl = encode(args.model, text)
    if args.max_tokens > 0:
        ids = ids[: args.max_tokens]
    if len(ids) < 2:
        raise SystemExit("the text has fewer than 2 tokens")
    if args.ids_out:
        args.ids_out.write_text(json.dumps(ids))
    windows = sliding_windows(len(ids), args.max_length, args.stride)

    t0 = time.time()
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    model = load_model(args.model, dtype)
    load_s = time.time() - t0
    all_ids = torch.tensor(ids, dtype=torch.long, device="cuda")
    nll_sum = 0.0
    scored = 0
    t1 = time.time()
    with torch.inference_mode():
        for i, (begin, end, score_begin) in enumerate(windows):
            window = all_ids[begin:end]
            logits = model(window.unsqueeze(0)).logits[0]  # [end - begin, vocab], model dtype
            # Logit row j predicts the token at window position j + 1.
            rows = torch.arange(score_begin - begin - 1, end - begin - 1, device="cuda")
            lp = torch.log_softmax(logits[rows].float(), dim=-1)
            target = window[rows + 1]
            token_lp = lp.gather(1, target.unsqueeze(1)).squeeze(1).double()
            if not torch.isfinite(token_lp).all():
                raise SystemExit(f"non-finite logprob in window [{begin}, {end})")
            nll_sum -= float(token_lp.sum())
            scored += end - score_begin
            print(f"window {i + 1}/{len(windows)}: tokens [{begin}, {end}), running perplexity "
                  f"{math.exp(nll_sum / scored):.4f}", flush=True)
    torch.cuda.synchronize()
    mean_nll = nll_sum / scored
    result = {"perplexity": math.exp(mean_nll), "mean_nll": mean_nll, "nll_sum": nll_sum,
              "tokens": len(ids), "tokens_scored": scored, "windows": len(windows),
              "max_length": args.max_length, "stride": args.stride, "dtype": args.dtype,
              "tokenizer": tokenizer_impl, "load_s": load_s, "seconds": time.time() - t1,
              "model": str(args.model), "file": str(args.file),
              "torch": torch.__version__, "transformers": __import__("transformers").__version__}
    line = json.dumps(result)
    print(line, flush=True)
    if args.out:
        args.out.write_text(line + "\n")


if __name__ == "__main__":
    main()
