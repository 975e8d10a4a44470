#!/usr/bin/env python3
"""Builds a random model of a real architecture with transformers on the GPU (bf16), saves it as
a HF directory with the real tokenizer, and writes the transformers reference for it: prompt
logprobs of N prompts x L tokens and greedy continuations.

Usage: python3 e2e_reference.py --arch qwen3-8b --tokenizer DIR --out DIR [--prompts 32 --len 256]
       [--model-only: write OUT/model and stop] [--layers N: gpt-oss-20b only, its first N layers]
       [--fp8: qwen3-8b / llama3-8b in the HF FP8 layout (Qwen3-8B-FP8: F8_E4M3 decoder linears with
        bf16 128x128 weight_scale_inv); the reference runs the decoded FP8 weights]
Writes OUT/model/ (config, safetensors, tokenizer files) and OUT/reference.json:
  {"prompts": [[ids]], "logprobs": [[null, lp1, ...]], "top1": [[id...]], "margin": [[...]],
   "greedy": [[ids]], "logprobs_fp32": ..., "top1_fp32": ..., "margin_fp32": ...}

gpt-oss-20b is written in the layout of the real HF checkpoint (openai/gpt-oss-20b): the real
config.json (embedded below, quantization_config included; num_hidden_layers and layer_types cut
to --layers), the real tensor names, dtypes and shard files (tests/data/model_config/
gpt-oss-20b.tensors.derived.tsv), expert matrices as MXFP4 `*_blocks` / `*_scales` (mxfp4_py.py
says how) and everything else bf16. The expert parameters of the torch model are replaced by the
decoded MXFP4 values, so the reference runs exactly the weights the checkpoint encodes. The
written directory is then loaded back with from_pretrained (transformers dequantizes the MXFP4
itself; skipped with --model-only): every parameter must equal the model's bit for bit, and the
model takes its RoPE inv_freq (fp32 either way, last-bit differences). The reference is computed
with the in-memory model, whose parameters alone can be cast to fp32 (see hf_reload_check). Its
reference.json also has "meta": the init, the reload check, activation scales of one prompt, fp32
status, peak GPU memory.
Random init: HF's _init_weights with the real initializer_range 0.02, except GPT_OSS_INIT below.
Memory (24 layers): 42 GB bf16 model, 84 GB while the from_pretrained copy is compared, 84 GB for
the fp32 pass (.float() in place; skipped and marked in "meta" if it runs out of memory); measured
peak 81.7 GiB allocated (95 GB in nvidia-smi), 41-45 s in all for 32 x 256 prompts on the H200.
"""
import argparse
import json
import os
import shutil
import sys
import time
import traceback
from pathlib import Path

# The GPU host has no network: transformers must never try the hub (e.g. for MXFP4 kernels).
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import mxfp4_py  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
TEST_DATA = REPO / "tests" / "data"


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
    if arch == "gpt-oss-20b":
        return tf.GptOssForCausalLM, gpt_oss_config(GPT_OSS_20B_CONFIG["num_hidden_layers"])
    raise ValueError(arch)


# ---------------------------------------------------------------------------------------------
# gpt-oss-20b: the real HF checkpoint layout with MXFP4 experts.

# openai/gpt-oss-20b @ 6cee5e81ee83917806bbde320786a8fb61efebee : config.json, verbatim (the same
# file as tests/data/model_config/gpt-oss-20b.config.json; the GPU host sees only the repo).
GPT_OSS_20B_CONFIG = {
    "architectures": ["GptOssForCausalLM"],
    "attention_bias": True,
    "attention_dropout": 0.0,
    "eos_token_id": 200002,
    "experts_per_token": 4,
    "head_dim": 64,
    "hidden_act": "silu",
    "hidden_size": 2880,
    "initial_context_length": 4096,
    "initializer_range": 0.02,
    "intermediate_size": 2880,
    "layer_types": ["sliding_attention", "full_attention"] * 12,
    "max_position_embeddings": 131072,
    "model_type": "gpt_oss",
    "num_attention_heads": 64,
    "num_experts_per_tok": 4,
    "num_hidden_layers": 24,
    "num_key_value_heads": 8,
    "num_local_experts": 32,
    "output_router_logits": False,
    "pad_token_id": 199999,
    "quantization_config": {
        "modules_to_not_convert": [
            "model.layers.*.self_attn",
            "model.layers.*.mlp.router",
            "model.embed_tokens",
            "lm_head",
        ],
        "quant_method": "mxfp4",
    },
    "rms_norm_eps": 1e-05,
    "rope_scaling": {
        "beta_fast": 32.0,
        "beta_slow": 1.0,
        "factor": 32.0,
        "original_max_position_embeddings": 4096,
        "rope_type": "yarn",
        "truncate": False,
    },
    "rope_theta": 150000,
    "router_aux_loss_coef": 0.9,
    "sliding_window": 128,
    "swiglu_limit": 7.0,
    "tie_word_embeddings": False,
    "transformers_version": "4.55.0.dev0",
    "use_cache": True,
    "vocab_size": 201088,
}
# Same revision : generation_config.json.
GPT_OSS_20B_GENERATION_CONFIG = {
    "bos_token_id": 199998,
    "do_sample": True,
    "eos_token_id": [200002, 199999, 200012],
    "pad_token_id": 199999,
    "transformers_version": "4.55.0.dev0",
}
# Every tensor of the real checkpoint: name, shard file, dtype, shape, bytes.
GPT_OSS_TENSORS = TEST_DATA / "model_config" / "gpt-oss-20b.tensors.derived.tsv"
GPT_OSS_CHAT_TEMPLATE = TEST_DATA / "chat_templates" / "gpt-oss.jinja"  # not in the tokenizer dir
MXFP4_VECTORS = TEST_DATA / "kernels" / "mxfp4_test_vectors.derived.json"
EXPERT_MATRICES = ("mlp.experts.gate_up_proj", "mlp.experts.down_proj")
SAFETENSORS_DTYPES = {torch.bfloat16: "BF16", torch.float32: "F32", torch.uint8: "U8"}

# Departures from HF's init (weights N(0, 0.02), biases 0, sinks N(0, 0.02)). A random MoE is
# chaotic in bf16: rounding flips the top-4 expert choice of ~4% of tokens in layer 0, and each
# flip perturbs the residual enough to flip more in later layers. With HF's init, transformers'
# own bf16 run differs from its fp32 run by 0.33 / 1.2 nats (mean / p99 |logprob|) with 35%
# top-1 agreement over 24 layers, which would hide any bug of ours. Measured on the H200 (24
# layers, 256 tokens a prompt, bf16 vs fp32 of the same weights):
#   this init, 32 prompts (the e2e default): 0.036 / 0.17 nats (max 0.36); Qwen3-8B's random
#     init gives 0.053 / 0.17. A sweep with 4 prompts (another random draw, MXFP4 rounding left
#     out) gave 0.040 / 0.17, top-1 99% where the margin > 0.15, and with planted bugs (vs
#     bf16): experts one index off 0.86 / 2.7, sinks ignored 0.44 / 1.7, swiglu clamp missing
#     0.071 / 0.25, gate_up bias dropped 0.083 / 0.26
#   down_std 0.005 and no router bias spread: 0.52 / 1.8, top-1 19% (chaotic)
# The router bias spread makes the expert choice decisive (experts favoured differ per layer),
# the smaller down_proj makes a flip cost less; gate/up pre-activations have std ~2.7, so the
# swiglu clamp at 7.0 acts on ~0.5% of gates and ~1% of ups; final logits have std ~1.
GPT_OSS_INIT = {
    "bias_std": 0.1,          # q/k/v/o and expert biases: a dropped bias must show
    "sinks_std": 1.0,         # attention sinks, comparable to the attention logits
    "gate_up_std": 0.05,      # experts.gate_up_proj
    "down_std": 0.0025,       # experts.down_proj
    "router_bias_std": 2.0,   # mlp.router.bias (its weight keeps HF's 0.02)
}


def gpt_oss_config(layers):
    """GptOssConfig of the real config.json (as from_pretrained reads it: rope_scaling, extra keys
    and all) for its first `layers` layers, without quantization_config: the torch model holds
    the dequantized experts as plain bf16 parameters."""
    import transformers as tf
    d = {k: v for k, v in GPT_OSS_20B_CONFIG.items() if k != "quantization_config"}
    d.update(num_hidden_layers=layers, layer_types=GPT_OSS_20B_CONFIG["layer_types"][:layers])
    return tf.GptOssConfig.from_dict(d)


def mxfp4_quantize(w):
    """w [..., K] (K % 32 == 0) -> blocks uint8 [..., K/32, 16], scales uint8 [..., K/32]:
    mxfp4_py.encode_group on every 32 consecutive values of the last dim, vectorised (the same
    arithmetic as triton_kernels' downcast_to_mxfp_torch, which HF's quantize_to_mxfp4 calls)."""
    x = w.float().contiguous().view(*w.shape[:-1], w.shape[-1] // mxfp4_py.GROUP, mxfp4_py.GROUP)
    amax = x.abs().amax(dim=-1, keepdim=True)
    # max / 6 rounded up to a power of two: add 0x7FFFFF to the fp32 bits, keep the exponent.
    bits = ((amax / mxfp4_py.FP4_MAX).view(torch.int32) + 0x7FFFFF) & 0x7F800000
    scale = bits.view(torch.float32)
    q = x * torch.where(scale == 0, torch.zeros_like(scale), 1.0 / scale)  # exact: powers of two
    midpoints = torch.tensor(mxfp4_py.FP4_MIDPOINTS, dtype=torch.float32, device=x.device)
    codes = torch.bucketize(q.abs(), midpoints, right=True).to(torch.uint8)  # ties round up
    codes = (codes | (torch.signbit(q).to(torch.uint8) << 3)).reshape(*q.shape[:-1], 16, 2)
    blocks = codes[..., 0] | (codes[..., 1] << 4)  # low nibble = even element
    return blocks.contiguous(), (bits >> 23).squeeze(-1).to(torch.uint8)


def mxfp4_dequantize(blocks, scales):
    """blocks uint8 [..., G, 16] + scales uint8 [..., G] -> float32 [..., G*32], exact
    (mxfp4_py.decode_group on every group; transformers' convert_moe_packed_tensors before its
    transpose)."""
    lut = torch.tensor(mxfp4_py.FP4_VALUES, dtype=torch.float32, device=blocks.device)
    values = torch.stack((lut[(blocks & 0x0F).long()], lut[(blocks >> 4).long()]), dim=-1)
    s = scales.to(torch.int32)
    # 2^(s - 127) from its fp32 bits; s = 0 is the subnormal 2^-127.
    factor = torch.where(s > 0, (s << 23).view(torch.float32),
                         torch.full_like(s, 0x00400000).view(torch.float32))
    values = values.reshape(*blocks.shape[:-1], mxfp4_py.GROUP) * factor[..., None]
    return values.reshape(*blocks.shape[:-2], blocks.shape[-2] * mxfp4_py.GROUP)


def check_mxfp4_torch(device="cuda"):
    """The vectorised MXFP4 against the pure-Python one (itself checked by mxfp4_py.py's
    self-test): the derived test vectors decode as expected, and random groups (zeros, signed
    zeros, ties, scales from 1e-6 to 1e3) encode to the same bytes."""
    data = json.loads(MXFP4_VECTORS.read_text())
    for case in data["cases"]:
        blocks = torch.tensor(case["blocks"], dtype=torch.uint8, device=device)
        scales = torch.tensor(case["scales"], dtype=torch.uint8, device=device)
        got = mxfp4_dequantize(blocks, scales).transpose(1, 2).cpu()  # [E, G*32, R] as expected
        want = torch.tensor([[[-0.0 if v == "-0.0" else float(v) for v in row] for row in plane]
                             for plane in case["expected"]])
        if not (torch.equal(got, want) and torch.equal(torch.signbit(got), torch.signbit(want))):
            raise SystemExit(f"torch MXFP4 decode differs from test vectors ({case['name']})")
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(64, 4 * mxfp4_py.GROUP, generator=gen) * torch.logspace(-6, 3, 64)[:, None]
    x[0] = 0.0
    x[1, ::2] = -0.0
    x[2, :16] = torch.tensor([6.0, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 0.2499, 4.999, -0.25,
                              -0.1, -5.0, 7e-9, 1.0, -6.0])
    x[3, :2] = torch.tensor([7.0, 1.0])
    x = x.to(torch.bfloat16)
    blocks, scales = mxfp4_quantize(x.to(device))
    blocks, scales = blocks.cpu(), scales.cpu()
    for r in range(x.shape[0]):
        for g in range(x.shape[1] // mxfp4_py.GROUP):
            group = x[r, g * mxfp4_py.GROUP:(g + 1) * mxfp4_py.GROUP].float().tolist()
            want_blocks, want_scale = mxfp4_py.encode_group(group)
            if blocks[r, g].tolist() != want_blocks or int(scales[r, g]) != want_scale:
                raise SystemExit(f"torch MXFP4 encode differs from mxfp4_py (row {r} group {g})")
            got = mxfp4_dequantize(blocks[r, g][None], scales[r, g][None]).tolist()
            if got != mxfp4_py.decode_group(want_blocks, want_scale):
                raise SystemExit(f"torch MXFP4 decode differs from mxfp4_py (row {r} group {g})")


def experts_in_out(experts, cfg):
    """True if the expert parameters are [E, in, out] (transformers' gpt-oss layout: gate_up_proj
    [E, hidden, 2*inter] with gate/up interleaved on the last dim, down_proj [E, inter, hidden]),
    False if [E, out, in]. hidden == inter, so gate_up_proj's shape decides."""
    e, h, i = cfg.num_local_experts, cfg.hidden_size, cfg.intermediate_size
    shape = tuple(experts.gate_up_proj.shape)
    if shape not in ((e, h, 2 * i), (e, 2 * i, h)):
        raise SystemExit(f"unexpected experts.gate_up_proj shape {shape}")
    in_out = shape == (e, h, 2 * i)
    flag = getattr(experts, "is_transposed", None)  # transformers 5's expert-layout flag
    if flag is not None and bool(flag) != in_out:
        raise SystemExit(f"experts.is_transposed={flag} contradicts gate_up_proj shape {shape}")
    return in_out


def build_gpt_oss_model(cfg):
    """Random bf16 GptOssForCausalLM on the GPU, parameters created in bf16 the way
    from_pretrained(dtype=bfloat16) creates them (default dtype), so the RoPE inv_freq buffer is
    computed in fp32 and never rounded (unlike `.to(bfloat16)`, see main)."""
    import transformers as tf
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device("cuda"):
            model = tf.GptOssForCausalLM(cfg).eval()
    finally:
        torch.set_default_dtype(default)
    for name, module in list(model.named_modules()):
        inv_freq = getattr(module, "inv_freq", None)
        if isinstance(inv_freq, torch.Tensor) and inv_freq.dtype != torch.float32:
            # A rotary module that followed the default dtype: rebuild it in fp32.
            parent, _, attr = name.rpartition(".")
            setattr(model.get_submodule(parent) if parent else model, attr,
                    type(module)(config=model.config, device="cuda"))
    for name, buf in model.named_buffers():
        if "inv_freq" in name and buf.dtype != torch.float32:
            raise SystemExit(f"{name} is {buf.dtype}, not float32")
    with torch.no_grad():
        for p in model.parameters():
            if p.dtype != torch.bfloat16:  # e.g. a module kept in fp32: the checkpoint is bf16
                p.data = p.data.to(torch.bfloat16)
        init = GPT_OSS_INIT
        for layer in model.model.layers:
            attn, experts = layer.self_attn, layer.mlp.experts
            for proj in (attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj):
                proj.bias.normal_(0.0, init["bias_std"])
            attn.sinks.normal_(0.0, init["sinks_std"])
            layer.mlp.router.bias.normal_(0.0, init["router_bias_std"])
            experts.gate_up_proj.normal_(0.0, init["gate_up_std"])
            experts.down_proj.normal_(0.0, init["down_std"])
            experts.gate_up_proj_bias.normal_(0.0, init["bias_std"])
            experts.down_proj_bias.normal_(0.0, init["bias_std"])
    return model


def check_against_hf_decoder(blocks, scales, dense_in_out):
    """transformers' own MXFP4 decoder (convert_moe_packed_tensors, which from_pretrained uses to
    dequantize) on one packed matrix must give the parameter ([E, in, out]) exactly."""
    try:
        from transformers.integrations.mxfp4 import convert_moe_packed_tensors
    except ImportError as e:
        return f"unavailable ({e})"
    try:
        hf = convert_moe_packed_tensors(blocks.cuda(), scales.cuda())
    except Exception as e:  # noqa: BLE001 - another transformers version's signature, say
        return f"failed to run: {type(e).__name__}: {e}"[:300]
    same = hf.shape == dense_in_out.shape and torch.equal(hf.to(dense_in_out.dtype), dense_in_out)
    del hf
    torch.cuda.empty_cache()
    if not same:
        raise SystemExit("transformers' convert_moe_packed_tensors decodes our MXFP4 differently")
    return "identical"


def quantize_experts(model, cfg, meta):
    """Every expert matrix -> MXFP4 as the checkpoint stores it: blocks [E, out, in/32, 16] and
    scales [E, out, in/32] (rows = output features, groups of 32 along the input features, the
    gate/up rows interleaved as in the parameter). The decoded values are written back into the
    parameter, so the model holds exactly what the checkpoint encodes.
    Returns {checkpoint name: CPU tensor}."""
    packed = {}
    with torch.no_grad():
        for i, layer in enumerate(model.model.layers):
            experts = layer.mlp.experts
            in_out = experts_in_out(experts, cfg)
            for proj in ("gate_up_proj", "down_proj"):
                param = getattr(experts, proj)
                rows = param.data.transpose(1, 2) if in_out else param.data  # [E, out, in] view
                e, r, k = rows.shape
                blocks = torch.empty((e, r, k // mxfp4_py.GROUP, 16), dtype=torch.uint8)
                scales = torch.empty((e, r, k // mxfp4_py.GROUP), dtype=torch.uint8)
                for x in range(e):
                    b, s = mxfp4_quantize(rows[x])
                    decoded = mxfp4_dequantize(b, s).to(param.dtype)
                    if i == 0 and x == 0:
                        err = (decoded.float() - rows[x].float()).norm() / rows[x].float().norm()
                        meta[f"mxfp4_rel_rms_error_{proj}"] = float(err)
                    rows[x].copy_(decoded)
                    blocks[x].copy_(b)
                    scales[x].copy_(s)
                name = f"model.layers.{i}.mlp.experts.{proj}"
                packed[name + "_blocks"], packed[name + "_scales"] = blocks, scales
                if i == 0:
                    meta[f"hf_decoder_{proj}"] = check_against_hf_decoder(
                        blocks, scales, param.data if in_out else param.data.transpose(1, 2))
    return packed


def read_tensor_table(layers):
    """{name: (shard, dtype, shape, nbytes)} of the real checkpoint, layers >= `layers` left out."""
    table = {}
    for line in GPT_OSS_TENSORS.read_text().splitlines():
        if not line or line.startswith("#") or line.startswith("name\t"):
            continue
        name, shard, dtype, shape, nbytes = line.split("\t")
        parts = name.split(".")
        if len(parts) > 2 and parts[1] == "layers" and int(parts[2]) >= layers:
            continue
        table[name] = (shard, dtype, json.loads(shape), int(nbytes))
    return table


def write_gpt_oss(model, packed, model_dir, layers):
    """OUT/model in the real checkpoint's layout: every tensor of the real checkpoint (those of
    the first `layers` layers) with its name, dtype, shape and shard file, and the index."""
    from safetensors.torch import save_file
    table = read_tensor_table(layers)
    tensors = {k: v for k, v in model.state_dict().items() if not k.endswith(EXPERT_MATRICES)}
    tensors.update(packed)
    problems = [f"missing {n}" for n in sorted(set(table) - set(tensors))]
    problems += [f"not in the real checkpoint: {n}" for n in sorted(set(tensors) - set(table))]
    for name in sorted(set(table) & set(tensors)):
        t, (_, dtype, shape, _) = tensors[name], table[name]
        if SAFETENSORS_DTYPES.get(t.dtype) != dtype or list(t.shape) != shape:
            problems.append(f"{name}: {t.dtype} {list(t.shape)}, real {dtype} {shape}")
    if problems:
        raise SystemExit("gpt-oss tensors differ from the real checkpoint's:\n  " +
                         "\n  ".join(problems[:20]))
    model_dir.mkdir(parents=True, exist_ok=True)
    for shard in sorted({v[0] for v in table.values()}):
        names = sorted(n for n in table if table[n][0] == shard)
        save_file({n: tensors[n].detach().to("cpu").contiguous() for n in names},
                  str(model_dir / shard), metadata={"format": "pt"})
    total = sum(v[3] for v in table.values())
    if layers == GPT_OSS_20B_CONFIG["num_hidden_layers"] and total != 13761264768:
        raise SystemExit(f"total_size {total}, the real index says 13761264768")
    index = {"metadata": {"total_size": total},
             "weight_map": {n: table[n][0] for n in sorted(table)}}
    (model_dir / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
    config = dict(GPT_OSS_20B_CONFIG, num_hidden_layers=layers,
                  layer_types=GPT_OSS_20B_CONFIG["layer_types"][:layers])
    (model_dir / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    (model_dir / "generation_config.json").write_text(
        json.dumps(GPT_OSS_20B_GENERATION_CONFIG, indent=2) + "\n")


def hf_reload_check(model, model_dir):
    """Loads OUT/model as users do and requires every parameter and the RoPE attention scaling
    to equal the in-memory model's bit for bit, and its inv_freq up to fp32 rounding (then the
    model takes from_pretrained's). from_pretrained gets
    Mxfp4Config(dequantize=True): transformers' MXFP4 matmul kernels are fetched from the hub
    by the `kernels` package, which the offline GPU host cannot reach; dequantizing uses
    transformers' own decoder (convert_moe_packed_tensors).
    The reference is then computed with the in-memory model: the same weights, and its
    parameters can be cast to fp32 (transformers refuses .float() on a quantized model)."""
    import transformers as tf
    try:
        loaded = tf.GptOssForCausalLM.from_pretrained(
            str(model_dir), dtype=torch.bfloat16, device_map="cuda",
            quantization_config=tf.Mxfp4Config(dequantize=True)).eval()
    except Exception as e:  # noqa: BLE001 - reported in reference.json, the run goes on
        traceback.print_exc()
        return f"from_pretrained failed: {type(e).__name__}: {e}"[:500]
    ours, theirs = dict(model.named_parameters()), dict(loaded.named_parameters())
    problems = [f"only ours: {n}" for n in sorted(set(ours) - set(theirs))]
    problems += [f"only from_pretrained: {n}" for n in sorted(set(theirs) - set(ours))]
    for name in sorted(set(ours) & set(theirs)):
        a, b = ours[name].data, theirs[name].data
        if a.dtype != b.dtype:  # e.g. norms kept in fp32 by from_pretrained
            a, b = a.float(), b.float()
        if a.shape != b.shape or not torch.equal(a, b):
            problems.append(f"{name}: {tuple(theirs[name].shape)} {theirs[name].dtype} differs")
    # RoPE: from_pretrained computes inv_freq in fp32 too, but maybe on another device (the pow
    # differs in the last bit between CPU and GPU). Anything beyond that is a problem; within it,
    # the reference takes from_pretrained's values, as users get them.
    their_buffers, rope_note = dict(loaded.named_buffers()), "inv_freq identical"
    with torch.no_grad():
        for name, buf in model.named_buffers():
            if "inv_freq" not in name:
                continue
            theirs_buf = their_buffers.get(name)
            if theirs_buf is None or theirs_buf.dtype != torch.float32 or \
                    theirs_buf.shape != buf.shape:
                dtype = None if theirs_buf is None else theirs_buf.dtype
                problems.append(f"buffer {name}: from_pretrained has {dtype}")
                continue
            theirs_buf = theirs_buf.to(buf.device)
            if not torch.equal(buf, theirs_buf):
                rel = float(((buf.double() - theirs_buf.double()) / theirs_buf.double())
                            .abs().max())
                if rel > 1e-6:
                    problems.append(f"buffer {name} differs (max rel. {rel:.2e})")
                buf.copy_(theirs_buf)
                rope_note = f"inv_freq from from_pretrained (ours differed by max rel. {rel:.1e})"
    for name, module in model.named_modules():
        if hasattr(module, "attention_scaling"):
            if getattr(loaded.get_submodule(name), "attention_scaling", None) != \
                    module.attention_scaling:
                problems.append(f"{name}.attention_scaling differs")
    del loaded, theirs, their_buffers
    torch.cuda.empty_cache()
    if problems:
        raise SystemExit("from_pretrained of the written checkpoint differs from the model:\n  " +
                         "\n  ".join(problems[:20]))
    return f"parameters identical, {rope_note}"


def activation_stats(model, ids):
    """Scales of one prompt's activations in the first and last layer (RMS of the attention and
    MoE outputs, share of expert gate/up pre-activations beyond the swiglu clamp, over all
    experts) and of the logits: evidence that the init is neither degenerate nor exploding."""
    stats, hooks = {}, []
    layers = model.model.layers
    limit = model.config.swiglu_limit

    def rms(t):
        return float(t.float().pow(2).mean().sqrt())

    for i in sorted({0, len(layers) - 1}):
        layer = layers[i]

        def attn_out(m, a, o, i=i):
            stats[f"layer{i}_attn_out_rms"] = rms(o)

        def mlp_in(m, args, kwargs, i=i):
            x = (args[0] if args else kwargs["hidden_states"]).reshape(-1, model.config.hidden_size)
            ex = m.experts
            w = ex.gate_up_proj if experts_in_out(ex, model.config) else \
                ex.gate_up_proj.transpose(1, 2)
            gate_up = torch.einsum("th,eho->eto", x, w) + ex.gate_up_proj_bias[:, None, :]
            stats[f"layer{i}_gate_up_rms"] = rms(gate_up)
            stats[f"layer{i}_gate_over_limit"] = float((gate_up[..., ::2] > limit).float().mean())
            stats[f"layer{i}_up_over_limit"] = float(
                (gate_up[..., 1::2].abs() > limit).float().mean())

        def mlp_out(m, a, o, i=i):
            stats[f"layer{i}_moe_out_rms"] = rms(o[0] if isinstance(o, tuple) else o)

        hooks.append(layer.self_attn.o_proj.register_forward_hook(attn_out))
        hooks.append(layer.mlp.register_forward_pre_hook(mlp_in, with_kwargs=True))
        hooks.append(layer.mlp.register_forward_hook(mlp_out))
    hooks.append(model.model.norm.register_forward_pre_hook(
        lambda m, a: stats.__setitem__("final_residual_rms", rms(a[0]))))
    try:
        with torch.no_grad():
            logits = model(ids.unsqueeze(0).cuda()).logits[0].float()
    finally:
        for h in hooks:
            h.remove()
    top = torch.topk(logits, 2, dim=-1)
    margin = top.values[:, 0] - top.values[:, 1]
    stats.update(logits_finite=bool(torch.isfinite(logits).all()), logits_std=float(logits.std()),
                 top2_margin_mean=float(margin.mean()),
                 top2_margin_over_0_15=float((margin > 0.15).float().mean()))
    return stats


def build_gpt_oss(args):
    """The random gpt-oss-20b and OUT/model (see the module docstring).
    Returns (model, cfg, meta)."""
    t0 = time.time()
    check_mxfp4_torch()
    layers = args.layers or GPT_OSS_20B_CONFIG["num_hidden_layers"]
    cfg = gpt_oss_config(layers)
    meta = {"arch": args.arch, "layers": layers, "init": dict(GPT_OSS_INIT, weights_std=0.02),
            "rope": str(getattr(cfg, "rope_parameters", None) or
                        getattr(cfg, "rope_scaling", None))}
    torch.manual_seed(0)
    model = build_gpt_oss_model(cfg)
    meta["attention_scaling"] = getattr(model.model.rotary_emb, "attention_scaling", None)
    print(f"built gpt-oss ({layers} layers) in {time.time() - t0:.1f} s; rope {meta['rope']}, "
          f"attention_scaling {meta['attention_scaling']}", flush=True)
    packed = quantize_experts(model, cfg, meta)
    print(f"MXFP4 experts in {time.time() - t0:.1f} s: HF decoder "
          f"{meta.get('hf_decoder_gate_up_proj')} / {meta.get('hf_decoder_down_proj')}, "
          f"rel. RMS error {meta['mxfp4_rel_rms_error_gate_up_proj']:.3f} / "
          f"{meta['mxfp4_rel_rms_error_down_proj']:.3f}", flush=True)
    model_dir = args.out / "model"
    write_gpt_oss(model, packed, model_dir, layers)
    del packed
    copy_tokenizer(args.tokenizer, model_dir, GPT_OSS_CHAT_TEMPLATE)
    print(f"built and saved {args.arch} in {time.time() - t0:.1f} s", flush=True)
    if not args.model_only:
        meta["hf_reload"] = hf_reload_check(model, model_dir)
        print(f"from_pretrained of {model_dir}: {meta['hf_reload']} ({time.time() - t0:.1f} s)",
              flush=True)
    return model, cfg, meta


FP8_BLOCK = 128
FP8_LINEARS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
               "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")


def fp8_quantize(w, block=FP8_BLOCK):
    """HF "fp8" block quantisation as kernels/fp8.h does it: per block scale_inv =
    bf16(amax / 448) (1 for an all-zero block), codes = E4M3(w / scale_inv) rounded to nearest
    even, saturating at +-448. Returns (codes float8_e4m3fn [R, C], scale_inv bf16 [ceil(R/b),
    ceil(C/b)], dequantised fp32 [R, C])."""
    w = w.float()
    rows, cols = w.shape
    pr, pc = (-rows) % block, (-cols) % block
    padded = torch.nn.functional.pad(w, (0, pc, 0, pr))
    nb0, nb1 = padded.shape[0] // block, padded.shape[1] // block
    blocks = padded.view(nb0, block, nb1, block)
    amax = blocks.abs().amax(dim=(1, 3))
    scale = (amax / 448.0).to(torch.bfloat16).float()
    scale[amax == 0] = 1.0
    full = scale.repeat_interleave(block, 0).repeat_interleave(block, 1)[:rows, :cols]
    codes = (w / full).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)
    return codes, scale.to(torch.bfloat16), codes.float() * full


def fp8_act_quantize(x, group=FP8_BLOCK):
    """The W8A8 path's activations as kernels::QuantizeFp8Rows makes them: per row and `group`
    columns scale = amax / 448 in fp32 (1 for an all-zero group), codes = E4M3(x / scale) rounded
    to nearest even, saturating; returned decoded (codes * scale) in x's dtype. In a bf16 model
    that decode is rounded to bf16 once more (xserv's FP8 GEMM takes codes and scales exactly),
    so the fp32 emulation is the cleaner yardstick of the two."""
    shape = x.shape
    g = x.float().reshape(*shape[:-1], shape[-1] // group, group)
    amax = g.abs().amax(dim=-1, keepdim=True)
    scale = torch.where(amax > 0, amax / 448.0, torch.ones_like(amax))
    codes = (g / scale).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)
    return (codes.float() * scale).reshape(shape).to(x.dtype)


def hook_w8a8(model):
    """Feeds every FP8 decoder linear FP8-rounded activations (fp8_act_quantize): transformers
    emulating xserv-worker --fp8-w8a8. Returns a callable that undoes it."""
    handles = [m.register_forward_pre_hook(lambda mod, args: (fp8_act_quantize(args[0]),) + args[1:])
               for name, m in model.named_modules() if name.endswith(FP8_LINEARS)]
    return lambda: [h.remove() for h in handles]


def hook_fp8_kv(model):
    """Rounds the keys (after q/k-norm and RoPE) and values every attention layer sees through the
    FP8 KV cache's arithmetic (fp8_act_quantize over each (token, kv head)'s head_dim values, as
    kernels::QuantizeFp8Group): transformers emulating xserv-worker --kv-cache-dtype fp8. Wraps
    the model's attention function (its module's eager_attention_forward, or the
    ALL_ATTENTION_FUNCTIONS entry of its implementation). Returns a callable that undoes it."""
    import sys
    attn = next(m for name, m in model.named_modules() if name.endswith("self_attn"))
    module = sys.modules[type(attn).__module__]
    impl = model.config._attn_implementation
    q = lambda t: fp8_act_quantize(t, group=t.shape[-1])
    if impl == "eager":
        base = module.eager_attention_forward
        module.eager_attention_forward = lambda m, qs, k, v, *a, **kw: base(m, qs, q(k), q(v), *a, **kw)
        return lambda: setattr(module, "eager_attention_forward", base)
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
    base = ALL_ATTENTION_FUNCTIONS[impl]
    ALL_ATTENTION_FUNCTIONS[impl] = lambda m, qs, k, v, *a, **kw: base(m, qs, q(k), q(v), *a, **kw)
    return lambda: ALL_ATTENTION_FUNCTIONS.__setitem__(impl, base)


def write_fp8(model, cfg, model_dir):
    """Writes `model` as a Qwen3-8B-FP8-layout checkpoint (../shared/refdata/qwen3-8b-fp8): every
    decoder linear as F8_E4M3 codes + bf16 weight_scale_inv, the rest bf16, config with the real
    quantization_config. The model's linears are replaced by the decoded FP8 values (exact in
    fp32; the bf16 model holds them rounded), so the reference runs the checkpoint's weights.
    Returns the fp32 state dict of those weights for the fp32 reference."""
    from safetensors.torch import save_file
    tensors, fp32_state = {}, {}
    with torch.no_grad():
        for name, p in model.state_dict().items():
            if any(name.endswith(f"{lin}.weight") for lin in FP8_LINEARS):
                codes, scale, deq = fp8_quantize(p)
                tensors[name] = codes.contiguous()
                tensors[name + "_scale_inv"] = scale.contiguous()
                fp32_state[name] = deq
                p.copy_(deq.to(p.dtype))
            else:
                tensors[name] = p.detach().to(torch.bfloat16).contiguous()
                fp32_state[name] = p.detach().float()
    model_dir.mkdir(parents=True, exist_ok=True)
    save_file({k: v.cpu() for k, v in tensors.items()}, str(model_dir / "model.safetensors"),
              metadata={"format": "pt"})
    config = cfg.to_dict()
    config["architectures"] = [type(model).__name__]
    config["torch_dtype"] = config["dtype"] = "bfloat16"
    config["quantization_config"] = {"activation_scheme": "dynamic", "fmt": "e4m3",
                                     "quant_method": "fp8",
                                     "weight_block_size": [FP8_BLOCK, FP8_BLOCK]}
    (model_dir / "config.json").write_text(json.dumps(config, indent=2))
    return fp32_state


GPT_OSS_FP8_LINEARS = FP8_LINEARS[:4]  # the attention's: gpt-oss has no dense MLP


def quantize_gpt_oss_on_load(model):
    """gpt-oss's weights as xserv-worker --quantization fp8 computes with them: every attention
    linear and each expert's gate_up and down matrices through fp8_quantize (128 x 128 blocks of
    the [out, in] matrix, as WeightLoader tiles them; HF holds experts as [E, in, out]), in place.
    The router stays as it is."""
    with torch.no_grad():
        for name, m in model.named_modules():
            if name.endswith(GPT_OSS_FP8_LINEARS):
                m.weight.copy_(fp8_quantize(m.weight)[2].to(m.weight.dtype))
            elif name.endswith("mlp.experts"):
                for p in (m.gate_up_proj, m.down_proj):
                    for e in range(p.shape[0]):
                        p[e].copy_(fp8_quantize(p[e].t())[2].t().to(p.dtype))


def copy_tokenizer(src, model_dir, chat_template=None):
    """The tokenizer files of `src`; `chat_template` as chat_template.jinja if `src` has none."""
    for name in ["tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt",
                 "chat_template.jinja"]:
        if (src / name).exists():
            shutil.copy(src / name, model_dir / name)
    if chat_template is not None and not (model_dir / "chat_template.jinja").exists():
        shutil.copy(chat_template, model_dir / "chat_template.jinja")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", required=True)
    ap.add_argument("--tokenizer", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--len", type=int, default=256)
    ap.add_argument("--greedy", type=int, default=32)
    ap.add_argument("--model-only", action="store_true", help="save OUT/model, skip the reference")
    ap.add_argument("--layers", type=int, default=0,
                    help="gpt-oss-20b: build its first N layers (0: all 24)")
    ap.add_argument("--fp8", action="store_true",
                    help="qwen3-8b / llama3-8b: write the HF FP8 layout (128x128 block scales); "
                         "the reference also scores W8A8 (activations FP8-rounded as "
                         "--fp8-w8a8 does) in bf16 and fp32. gpt-oss-20b: the checkpoint stays "
                         "MXFP4; the reference also scores the weights --quantization fp8 makes "
                         "(quantize_gpt_oss_on_load) in fp32 and bf16")
    ap.add_argument("--kv-fp8", action="store_true",
                    help="the reference also scores with keys and values rounded as the FP8 KV "
                         "cache stores them (hook_fp8_kv), in bf16 and fp32")
    args = ap.parse_args()
    gpt_oss = args.arch == "gpt-oss-20b"
    if args.layers and not gpt_oss:
        ap.error("--layers is implemented for gpt-oss-20b only")
    if args.fp8 and args.arch not in ("qwen3-8b", "llama3-8b", "gpt-oss-20b"):
        ap.error("--fp8 is implemented for qwen3-8b, llama3-8b and gpt-oss-20b")
    if gpt_oss:
        model, cfg, meta = build_gpt_oss(args)
        if args.model_only:
            return
    else:
        cls, cfg = build(args.arch)
        torch.manual_seed(0)
        t0 = time.time()
        with torch.device("cuda"):
            model = cls(cfg).to(torch.bfloat16).eval()
        model_dir = args.out / "model"
        fp8_state = None
        if args.fp8:
            fp8_state = write_fp8(model, cfg, model_dir)
        else:
            model.save_pretrained(str(model_dir), max_shard_size="5GB")
        copy_tokenizer(args.tokenizer, model_dir)
        print(f"built and saved {args.arch}{' (FP8)' if args.fp8 else ''} in "
              f"{time.time() - t0:.1f} s", flush=True)
        if args.model_only:
            return
        # Reload as users do. `.to(bfloat16)` above also rounded the rotary inv_freq buffer to
        # bf16, which shifts every RoPE angle (0.5 rad at position 255 for the fastest pair) and
        # which `.float()` does not undo; from_pretrained computes inv_freq in fp32. The FP8
        # checkpoint is not reloaded through transformers' FP8 path: fresh models (fp32 RoPE)
        # take the decoded weights instead, rounded to bf16 here and exact in fp32 below.
        del model
        if fp8_state is None:
            model = cls.from_pretrained(str(model_dir), dtype=torch.bfloat16).cuda().eval()
        else:
            with torch.device("cuda"):
                model = cls(cfg).eval()
            model.load_state_dict(fp8_state, strict=True)
            inv_freq = model.model.rotary_emb.inv_freq.clone()  # fp32, as from_pretrained has it
            model = model.to(torch.bfloat16)
            model.model.rotary_emb.inv_freq = inv_freq
    gen = torch.Generator().manual_seed(1)
    vocab = min(cfg.vocab_size, 50000)  # ordinary tokens, no specials
    ref = {"prompts": [], "logprobs": [], "top1": [], "margin": [], "greedy": [],
           "logprobs_fp32": [], "top1_fp32": [], "margin_fp32": []}
    # Emulations of xserv's FP8 paths, each scored in bf16 and in fp32 (suffixes NAME and
    # NAME_fp32): W8A8 (hook_w8a8) and the FP8 KV cache (hook_fp8_kv).
    emulations = {name: hook for name, hook, on in (("_w8a8", hook_w8a8, args.fp8 and not gpt_oss),
                                                    ("_fp8kv", hook_fp8_kv, args.kv_fp8)) if on}
    # gpt-oss with --fp8: the weights quantised on load ("_fp8w"), scored last (in place).
    fp8_weights = gpt_oss and args.fp8
    for name in list(emulations) + (["_fp8w"] if fp8_weights else []):
        for suffix in (name, name + "_fp32"):
            ref.update({f"logprobs{suffix}": [], f"top1{suffix}": [], f"margin{suffix}": []})

    def score_emulated(m, fp32):
        for name, hook in emulations.items():
            undo = hook(m)
            for ids in prompts:
                score(m, ids, name + ("_fp32" if fp32 else ""))
            undo()
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
        if gpt_oss:
            meta["activations"] = activation_stats(model, prompts[0])
            print(f"activations: {json.dumps(meta['activations'])}", flush=True)
        for ids in prompts:
            ref["prompts"].append(ids.tolist())
            score(model, ids, "")
        for p in ref["prompts"][:4]:
            out = model.generate(torch.tensor([p]).cuda(), max_new_tokens=args.greedy,
                                 do_sample=False, eos_token_id=None, pad_token_id=0)
            ref["greedy"].append(out[0, len(p):].tolist())
        score_emulated(model, fp32=False)
        # The same weights computed in fp32: the yardstick for what bf16 rounding alone costs
        # (HF bf16 vs HF fp32), against which our bf16 error (ours vs HF fp32) is judged.
        if gpt_oss:
            # The in-memory model cast in place (84 GB for 24 layers): its RoPE buffers are fp32
            # already, and the MXFP4-decoded expert values are exact in any float type.
            try:
                model = model.float()
                meta["fp32"] = "in-memory model cast with .float()"
            except torch.OutOfMemoryError as e:
                model = None
                torch.cuda.empty_cache()
                meta["fp32"] = f"skipped, out of GPU memory: {e}"[:300]
                print(meta["fp32"], flush=True)
        elif fp8_state is not None:
            del model
            with torch.device("cuda"):
                model = cls(cfg).eval()
            model.load_state_dict(fp8_state, strict=True)
        else:
            del model
            model = cls.from_pretrained(str(model_dir), dtype=torch.float32).cuda().eval()
        if model is not None:
            for ids in prompts:
                score(model, ids, "_fp32")
            score_emulated(model, fp32=True)
            if fp8_weights:
                # FP8 values times bf16 scales, exact in fp32; the device rounds each product to
                # bf16 once, as the cast back does. RoPE's fp32 inv_freq is kept.
                quantize_gpt_oss_on_load(model)
                for ids in prompts:
                    score(model, ids, "_fp8w_fp32")
                inv_freq = model.model.rotary_emb.inv_freq.clone()
                model = model.to(torch.bfloat16)
                model.model.rotary_emb.inv_freq = inv_freq
                for ids in prompts:
                    score(model, ids, "_fp8w")
    if gpt_oss:
        meta["peak_gpu_gib"] = torch.cuda.max_memory_allocated() / 2**30
        ref["meta"] = meta
        print(f"peak GPU memory allocated {meta['peak_gpu_gib']:.1f} GiB", flush=True)
    (args.out / "reference.json").write_text(json.dumps(ref))
    print(f"reference written ({args.prompts} x {args.len})", flush=True)

if __name__ == "__main__":
    main()
