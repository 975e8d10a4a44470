#!/usr/bin/env python3
"""Builds a random model of a real architecture with transformers on the GPU (bf16), saves it as
a HF directory with the real tokenizer, and writes the transformers reference for it: prompt
logprobs of N prompts x L tokens and greedy continuations.

Usage: python3 e2e_reference.py --arch qwen3-8b --tokenizer DIR --out DIR [--prompts 32 --len 256]
       [--model-only: write OUT/model and stop]
Writes OUT/model/ (config, safetensors, tokenizer files) and OUT/reference.json:
  {"prompts": [[ids]], "logprobs": [[null, lp1, ...]], "top1": [[id...]], "margin": [[...]],
   "greedy": [[ids]]}
"""
import argparse
import json
import shutil
import time
from pathlib import Path

import torch


def build(arch):
    import transformers as tf
    if arch == "qwen3-8b":
        cfg = tf.Qwen3Config(vocab_size=151936, hidden_size=4096, intermediate_size=12288,
                             num_hidden_layers=36, num_attention_heads=32, num_key_value_heads=8,
                             head_dim=128, max_position_embeddings=40960, rope_theta=1e6,
                             rms_norm_eps=1e-6, tie_word_embeddings=False,
                             bos_token_id=151643, eos_token_id=[151645, 151643])
        return tf.Qwen3ForCausalLM, cfg
    if arch == "llama3-8b":
        cfg = tf.LlamaConfig(vocab_size=128256, hidden_size=4096, intermediate_size=14336,
                             num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                             max_position_embeddings=8192, rope_theta=500000.0, rms_norm_eps=1e-5,
                             tie_word_embeddings=False, bos_token_id=128000, eos_token_id=128009)
        return tf.LlamaForCausalLM, cfg
    if arch == "gpt2":
        cfg = tf.GPT2Config(vocab_size=50257, n_positions=1024, n_embd=768, n_layer=12, n_head=12,
                            bos_token_id=50256, eos_token_id=50256)
        return tf.GPT2LMHeadModel, cfg
    raise ValueError(arch)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", required=True)
    ap.add_argument("--tokenizer", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--len", type=int, default=256)
    ap.add_argument("--greedy", type=int, default=32)
    ap.add_argument("--model-only", action="store_true", help="save OUT/model, skip the reference")
    args = ap.parse_args()
    cls, cfg = build(args.arch)
    torch.manual_seed(0)
    t0 = time.time()
    with torch.device("cuda"):
        model = cls(cfg).to(torch.bfloat16).eval()
    model_dir = args.out / "model"
    model.save_pretrained(str(model_dir), max_shard_size="5GB")
    for name in ["tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt"]:
        if (args.tokenizer / name).exists():
            shutil.copy(args.tokenizer / name, model_dir / name)
    print(f"built and saved {args.arch} in {time.time() - t0:.1f} s", flush=True)
    if args.model_only:
        return
    # Reload as users do. `.to(bfloat16)` above also rounded the rotary inv_freq buffer to bf16,
    # which shifts every RoPE angle (0.5 rad at position 255 for the fastest pair) and which
    # `.float()` does not undo; from_pretrained computes inv_freq in fp32.
    del model
    model = cls.from_pretrained(str(model_dir), dtype=torch.bfloat16).cuda().eval()
    gen = torch.Generator().manual_seed(1)
    vocab = min(cfg.vocab_size, 50000)  # ordinary tokens, no specials
    ref = {"prompts": [], "logprobs": [], "top1": [], "margin": [], "greedy": [],
           "logprobs_fp32": [], "top1_fp32": [], "margin_fp32": []}
    def score(m, ids, suffix):
        logits = m(ids.unsqueeze(0).cuda()).logits[0].float()
        lp = torch.log_softmax(logits, dim=-1)
        top = torch.topk(logits, 2, dim=-1)
        ref["logprobs" + suffix].append(
            [None] + [float(lp[i, ids[i + 1]]) for i in range(args.len - 1)])
        ref["top1" + suffix].append(top.indices[:, 0].tolist())
        ref["margin" + suffix].append((top.values[:, 0] - top.values[:, 1]).tolist())
    prompts = [torch.randint(0, vocab, (args.len,), generator=gen) for _ in range(args.prompts)]
    with torch.no_grad():
        for ids in prompts:
            ref["prompts"].append(ids.tolist())
            score(model, ids, "")
        for p in ref["prompts"][:4]:
            out = model.generate(torch.tensor([p]).cuda(), max_new_tokens=args.greedy,
                                 do_sample=False, eos_token_id=None, pad_token_id=0)
            ref["greedy"].append(out[0, len(p):].tolist())
        # The same weights computed in fp32: the yardstick for what bf16 rounding alone costs
        # (HF bf16 vs HF fp32), against which our bf16 error (ours vs HF fp32) is judged.
        del model
        model = cls.from_pretrained(str(model_dir), dtype=torch.float32).cuda().eval()
        for ids in prompts:
            score(model, ids, "_fp32")
    (args.out / "reference.json").write_text(json.dumps(ref))
    print(f"reference written ({args.prompts} x {args.len})", flush=True)


if __name__ == "__main__":
    main()
