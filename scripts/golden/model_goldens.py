#!/usr/bin/env python3
"""Builds tiny random models of every architecture with transformers, saves them in the HF layout
and writes reference outputs (GPU host; torch + transformers + safetensors).

Usage: python3 scripts/golden/model_goldens.py --out DIR

DIR/<name>/ gets config.json, generation_config.json, the weights (model.safetensors, or shards
+ model.safetensors.index.json) and golden.safetensors with, per input i:
  input_ids.i  I32 [n]      the prompt
  logits.i     F32 [n, V]   HF logits at every position (fp32 compute)
  greedy.i     I32 [m]      HF greedy continuation (no EOS), m = 16
  margin.i     F32 [m]      top-1 minus top-2 logit at each greedy step
Weights stored in bf16 are rounded first and the HF reference computes in fp32 from the rounded
values, so our fp32 CPU backend is expected to match to ~1e-5 relative. gpt-oss experts are
stored as MXFP4 blocks/scales in the HF checkpoint layout; HF computes with the dequantised
values (exactly representable). Deterministic: fixed seeds.
"""
import argparse
import inspect
import json
import zlib
from pathlib import Path

import torch
from safetensors.torch import save_file

VOCAB = 512
INPUT_LENGTHS = [40, 19]
GREEDY_TOKENS = 16


def round_bf16_(model, skip_suffixes=()):
    """Rounds parameters to bf16 values in place (still fp32 tensors); buffers such as RoPE's
    inv_freq stay exact fp32, as every implementation computes them."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if not name.endswith(tuple(skip_suffixes)):
                p.copy_(p.to(torch.bfloat16).to(torch.float32))


FP4_VALUES = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])


def mxfp4_quantize(w):
    """w: [E, R, K] float (K = input dim, multiple of 32). Returns (blocks u8 [E,R,K/32,16],
    scales u8 [E,R,K/32], dequantised float [E,R,K]) with HF's convert_moe_packed_tensors
    decoding: value = FP4[code] * 2^(scale-127), low nibble = even element."""
    E, R, K = w.shape
    g = w.reshape(E, R, K // 32, 32).double()
    amax = g.abs().amax(dim=-1, keepdim=True).clamp(min=1e-30)
    exp = torch.ceil(torch.log2(amax / 6.0))            # largest |x| maps to <= 6
    scaled = g / torch.pow(2.0, exp)
    mags = FP4_VALUES.double()
    idx = (scaled.abs().unsqueeze(-1) - mags).abs().argmin(dim=-1)  # nearest magnitude
    sign = (scaled < 0) & (idx > 0)
    codes = (idx + sign.long() * 8).to(torch.uint8)                  # [E,R,G,32]
    deq = mags[idx] * torch.where(sign, -1.0, 1.0) * torch.pow(2.0, exp)
    blocks = (codes[..., 0::2] | (codes[..., 1::2] << 4)).to(torch.uint8)  # [E,R,G,16]
    scales = (exp.squeeze(-1) + 127).to(torch.uint8)
    return blocks.contiguous(), scales.contiguous(), deq.reshape(E, R, K).float()


def make_inputs(seed):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(0, VOCAB, (n,), generator=gen) for n in INPUT_LENGTHS]


def reference(model, inputs):
    """Full-sequence forwards only (no KV cache, no generate() logits processors)."""
    model.eval()
    out = {}
    with torch.no_grad():
        for i, ids in enumerate(inputs):
            seq = ids.unsqueeze(0).cuda()
            out[f"input_ids.{i}"] = ids.to(torch.int32)
            out[f"logits.{i}"] = model(seq).logits[0].float().cpu()
            greedy, margins = [], []
            for _ in range(GREEDY_TOKENS):
                last = model(seq).logits[0, -1].float()
                top = torch.topk(last, 2)
                greedy.append(int(top.indices[0]))
                margins.append(float(top.values[0] - top.values[1]))
                seq = torch.cat([seq, top.indices[:1].view(1, 1)], dim=1)
            out[f"greedy.{i}"] = torch.tensor(greedy, dtype=torch.int32)
            out[f"margin.{i}"] = torch.tensor(margins, dtype=torch.float32)
    return out


def check_reload(cls, path: Path, golden, original=None, **kwargs):
    """Loads the saved directory back with transformers and compares logits: proves the files
    mean to HF what the reference computed (layouts, tying, MXFP4 decoding)."""
    try:
        reloaded = cls.from_pretrained(str(path), torch_dtype=torch.float32, **kwargs)
    except Exception as e:  # a transformers feature missing on this host: report, go on
        print(f"  reload check {path.name} SKIPPED: {type(e).__name__}: {e}")
        return
    # Upcast everything: a dequantising loader may keep some parameters in bf16.
    reloaded = reloaded.float().cuda().eval()
    if original is not None:
        ref = dict(original.named_parameters())
        for name, p in reloaded.named_parameters():
            if name not in ref:
                print(f"  reload: {name} not in the original model")
                continue
            q = ref[name].detach().float()
            if q.shape != p.shape:
                print(f"  reload: {name} shape {list(p.shape)} vs original {list(q.shape)}")
            elif (d := (q - p.detach().float()).abs().max().item()) > 0:
                print(f"  reload: {name} differs by {d:.3g}")
    with torch.no_grad():
        ids = golden["input_ids.0"].long().unsqueeze(0).cuda()
        logits = reloaded(ids).logits[0].float().cpu()
    diff = (logits - golden["logits.0"]).abs().max().item()
    print(f"  reload check {path.name}: max |logit diff| = {diff:.3g}")
    if diff > 1e-3:
        raise SystemExit(f"reload mismatch for {path.name}: {diff}")


def save_golden(model, path: Path, inputs, **save_kwargs):
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(path), safe_serialization=True, **save_kwargs)
    golden = reference(model, inputs)
    save_file(golden, str(path / "golden.safetensors"))
    check_reload(type(model), path, golden)


def build(name, out: Path):
    import transformers as tf
    torch.manual_seed(zlib.crc32(name.encode()) % 100000)
    inputs = make_inputs(11)
    common = dict(vocab_size=VOCAB, max_position_embeddings=256)
    path = out / name
    if name == "gpt2-tiny":
        cfg = tf.GPT2Config(vocab_size=VOCAB, n_positions=256, n_embd=64, n_layer=2, n_head=4,
                            bos_token_id=0, eos_token_id=0)
        model = tf.GPT2LMHeadModel(cfg).float().cuda()
        save_golden(model, path, inputs)
    elif name in ("qwen3-tiny", "qwen3-tiny-tied-bf16"):
        tied = name.endswith("bf16")
        cfg = tf.Qwen3Config(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                             rope_theta=10000.0, rms_norm_eps=1e-6, tie_word_embeddings=tied,
                             bos_token_id=1, eos_token_id=2, **common)
        model = tf.Qwen3ForCausalLM(cfg).float()
        with torch.no_grad():  # non-trivial norm weights so a missing norm cannot pass
            for n_, p in model.named_parameters():
                if "norm" in n_:
                    p.copy_(1.0 + 0.1 * torch.randn_like(p))
        if tied:
            round_bf16_(model)
        model = model.cuda()
        if tied:
            path.mkdir(parents=True, exist_ok=True)
            bf16_state = {k: v.to(torch.bfloat16) for k, v in model.state_dict().items()}
            model.save_pretrained(str(path), safe_serialization=True, state_dict=bf16_state)
            golden = reference(model, inputs)
            save_file(golden, str(path / "golden.safetensors"))
            check_reload(type(model), path, golden)
        else:
            save_golden(model, path, inputs)
    elif name == "llama3-tiny-sharded":
        cfg = tf.LlamaConfig(hidden_size=64, intermediate_size=160, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=1, rms_norm_eps=1e-5,
                             rope_theta=500000.0, tie_word_embeddings=False,
                             rope_scaling={"rope_type": "llama3", "factor": 8.0,
                                           "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                           "original_max_position_embeddings": 32},
                             bos_token_id=1, eos_token_id=2, **common)
        model = tf.LlamaForCausalLM(cfg).float()
        with torch.no_grad():
            for n_, p in model.named_parameters():
                if "norm" in n_:
                    p.copy_(1.0 + 0.1 * torch.randn_like(p))
        save_golden(model.cuda(), path, inputs, max_shard_size="200KB")
    elif name == "gpt-oss-tiny-mxfp4":
        build_gpt_oss(path, inputs)
    else:
        raise ValueError(name)
    print(f"{name}: {sorted(p.name for p in path.iterdir())}")


def build_gpt_oss(path: Path, inputs):
    import transformers as tf
    H, I, E = 64, 96, 4
    cfg = tf.GptOssConfig(vocab_size=VOCAB, hidden_size=H, intermediate_size=I,
                          num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                          head_dim=16, num_local_experts=E, num_experts_per_tok=2,
                          experts_per_token=2, sliding_window=8,
                          layer_types=["sliding_attention", "full_attention"],
                          rope_theta=150000.0, max_position_embeddings=256,
                          rope_scaling={"rope_type": "yarn", "factor": 4.0,
                                        "original_max_position_embeddings": 64,
                                        "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False},
                          swiglu_limit=7.0, rms_norm_eps=1e-5, attention_bias=True,
                          tie_word_embeddings=False, attn_implementation="eager",
                          bos_token_id=1, eos_token_id=2, pad_token_id=0)
    model = tf.GptOssForCausalLM(cfg).float()
    if hasattr(model, "set_attn_implementation"):
        model.set_attn_implementation("eager")  # sinks + sliding window as in the paper
    with torch.no_grad():
        for n_, p in model.named_parameters():
            if "norm" in n_:
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            elif n_.endswith("sinks"):
                p.copy_(torch.randn_like(p))
            elif "bias" in n_:
                p.copy_(0.1 * torch.randn_like(p))
            elif "experts" in n_:
                p.copy_(0.05 * torch.randn_like(p))
    round_bf16_(model, skip_suffixes=("experts.gate_up_proj", "experts.down_proj"))
    # Experts: quantise to MXFP4 in the checkpoint layout [E, out, in]; put the exact dequantised
    # values back into the HF parameters so HF computes with what our loader will decode.
    tensors = {}
    state = model.state_dict()
    for key, value in state.items():
        if key.endswith("experts.gate_up_proj") or key.endswith("experts.down_proj"):
            out_dim = 2 * I if key.endswith("gate_up_proj") else H
            w = value.detach().float().cpu()
            transposed = w.shape[1] != out_dim      # HF param [E, in, out] vs [E, out, in]
            w_oi = w.transpose(1, 2).contiguous() if transposed else w
            blocks, scales, deq = mxfp4_quantize(w_oi)
            with torch.no_grad():
                param = dict(model.named_parameters())[key]
                param.copy_(deq.transpose(1, 2) if transposed else deq)
            tensors[key + "_blocks"] = blocks
            tensors[key + "_scales"] = scales
            print(f"{key}: HF param {list(w.shape)} ({'[E,in,out]' if transposed else '[E,out,in]'})"
                  f" -> blocks {list(blocks.shape)}")
        else:
            tensors[key] = value.detach().to(torch.bfloat16).cpu().contiguous()
    path.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(path / "model.safetensors"), metadata={"format": "pt"})
    cfg_dict = json.loads(model.config.to_json_string())
    cfg_dict["quantization_config"] = {
        "quant_method": "mxfp4",
        "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                                   "model.embed_tokens", "lm_head"]}
    cfg_dict["torch_dtype"] = "bfloat16"
    (path / "config.json").write_text(json.dumps(cfg_dict, indent=2))
    model = model.cuda()
    model.generation_config.save_pretrained(str(path))
    golden = reference(model, inputs)
    save_file(golden, str(path / "golden.safetensors"))
    print(inspect.getsource(type(model.model.layers[0].mlp.experts).forward)[:3000])
    check_reload(tf.GptOssForCausalLM, path, golden, original=model,
                 quantization_config=tf.Mxfp4Config(dequantize=True))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    import transformers
    print("transformers", transformers.__version__, "torch", torch.__version__)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    names = ["gpt2-tiny", "qwen3-tiny", "qwen3-tiny-tied-bf16", "llama3-tiny-sharded",
             "gpt-oss-tiny-mxfp4"]
    for name in names:
        if args.only and name not in args.only.split(","):
            continue
        build(name, args.out)


if __name__ == "__main__":
    main()
