#!/usr/bin/env python3
"""transformers on the same weights as our engine bench, as the floor issue 9 asks for: bf16 on
the GPU, eager and (if it works there) torch.compile, greedy decode with a fixed number of new
tokens (min_new_tokens = max_new_tokens), static KV cache where supported.

Usage: python3 hf_floor.py --model DIR --prompt-len 128 --gen-len 64 --batch 1,64 [--compile]
Prints one JSON line: per batch size the prefill (time to first token) and decode ms/step, and
output tok/s, measured with CUDA synchronisation around generate() (best of --repeats).
"""
import argparse
import json
import time

import torch


def timed_generate(model, ids, new_tokens):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    model.generate(ids, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False,
                   pad_token_id=0)
    torch.cuda.synchronize()
    return time.perf_counter() - t0


def measure(model, batch, prompt_len, gen_len, repeats, vocab):
    g = torch.Generator().manual_seed(batch)
    ids = torch.randint(0, vocab, (batch, prompt_len), generator=g).cuda()
    timed_generate(model, ids, 2)  # warm-up (and compilation)
    first = min(timed_generate(model, ids, 1) for _ in range(repeats))
    full = min(timed_generate(model, ids, gen_len) for _ in range(repeats))
    decode_ms = 1e3 * (full - first) / (gen_len - 1)
    return {"batch": batch, "prefill_ms": 1e3 * first, "decode_ms_per_step": decode_ms,
            "decode_tokens_per_s": batch * 1e3 / decode_ms}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--gen-len", type=int, default=64)
    ap.add_argument("--batch", default="1,64")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--compile", action="store_true", help="also torch.compile the forward")
    args = ap.parse_args()
    import transformers as tf
    model = tf.AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.bfloat16).cuda().eval()
    vocab = model.config.vocab_size
    batches = [int(b) for b in args.batch.split(",") if b]
    out = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "hardware": torch.cuda.get_device_name(0), "torch": torch.__version__,
           "transformers": tf.__version__, "model": args.model,
           "config": {"prompt_len": args.prompt_len, "gen_len": args.gen_len, "dtype": "bf16",
                      "greedy": True},
           "eager": [], "compiled": None}
    with torch.inference_mode():
        for b in batches:
            out["eager"].append(measure(model, b, args.prompt_len, args.gen_len, args.repeats, vocab))
        if args.compile:
            try:
                model.generation_config.cache_implementation = "static"
                model.forward = torch.compile(model.forward, mode="reduce-overhead")
                out["compiled"] = [measure(model, b, args.prompt_len, args.gen_len, args.repeats,
                                           vocab) for b in batches]
            except Exception as e:  # report, do not hide: the floor is then eager only
                out["compiled"] = {"error": f"{type(e).__name__}: {e}"[:400]}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
