#!/usr/bin/env python3
"""Layer-by-layer error of our bf16 forward against transformers in fp32, next to the error of
transformers' own bf16 forward: finds where our CUDA path loses more precision than bf16 must.

Builds a random model of a real architecture (e2e_reference.build, optionally fewer layers), saves
it, scores one random prompt with `xserv-score --dump-activations` on each backend given, and
captures the same module outputs in transformers (bf16 and fp32) with hooks. Prints and writes
a table of relative errors ||x - ref|| / ||ref|| per activation, ref = transformers fp32 on the
CPU (transformers fp32 on the GPU is a column of its own).

Usage: python3 bisect_layers.py --arch llama3-8b --layers 8 --len 256 --score BIN --out DIR
"""
import argparse
import json
import struct
import subprocess
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from e2e_reference import build  # noqa: E402

DTYPES = {"BF16": torch.bfloat16, "F32": torch.float32, "F16": torch.float16}


def read_safetensors(path):
    raw = Path(path).read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        a, b = meta["data_offsets"]
        t = torch.frombuffer(bytearray(raw[8 + n + a:8 + n + b]), dtype=DTYPES[meta["dtype"]])
        out[name] = t.reshape(meta["shape"]).float()
    return out


def capture(model, ids, device="cuda"):
    """Module outputs named like Model::Observe in worker/model/llama.cc."""
    acts, hooks = {}, []
    def save(name, t):
        acts[name] = t[0].detach().float().cpu()  # batch of one
    for i, layer in enumerate(model.model.layers):
        def pre(mod, args, kwargs, i=i):
            h = args[0] if args else kwargs["hidden_states"]
            save(f"layers.{i}.input", h)
        hooks.append(layer.register_forward_pre_hook(pre, with_kwargs=True))
        hooks.append(layer.input_layernorm.register_forward_hook(
            lambda m, a, o, i=i: save(f"layers.{i}.attn_in", o)))
        hooks.append(layer.self_attn.o_proj.register_forward_pre_hook(
            lambda m, a, i=i: save(f"layers.{i}.attn", a[0])))
        hooks.append(layer.self_attn.o_proj.register_forward_hook(
            lambda m, a, o, i=i: save(f"layers.{i}.attn_out", o)))
        hooks.append(layer.post_attention_layernorm.register_forward_hook(
            lambda m, a, o, i=i: save(f"layers.{i}.mlp_in", o)))
        hooks.append(layer.mlp.register_forward_hook(
            lambda m, a, o, i=i: save(f"layers.{i}.mlp_out", o)))
    hooks.append(model.model.norm.register_forward_hook(lambda m, a, o: save("final_norm", o)))
    with torch.no_grad():
        logits = model(ids.unsqueeze(0).to(device)).logits[0].float()
    for h in hooks:
        h.remove()
    acts["logprobs"] = torch.log_softmax(logits, -1).cpu()
    return acts


def order_key(name):
    parts = name.split(".")
    steps = ["input", "attn_in", "attn", "attn_out", "mlp_in", "mlp_out"]
    if parts[0] == "layers":
        return (int(parts[1]), steps.index(parts[2]))
    return (10**6, 0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", required=True)
    ap.add_argument("--layers", type=int, default=0, help="0: the architecture's own depth")
    ap.add_argument("--len", type=int, default=256)
    ap.add_argument("--score", required=True, help="path of xserv-score")
    ap.add_argument("--backends", default="cuda,cpu")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    cls, cfg = build(args.arch)
    if args.layers:
        cfg.num_hidden_layers = args.layers
        if getattr(cfg, "layer_types", None):
            cfg.layer_types = cfg.layer_types[:args.layers]
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = cls(cfg).to(torch.bfloat16).eval()
    model_dir = args.out / "model"
    model.save_pretrained(str(model_dir))
    # Reload as users do: `.to(bfloat16)` above also rounded the rotary inv_freq buffer to bf16
    # (and `.float()` would not undo it); from_pretrained computes it in fp32.
    del model
    model = cls.from_pretrained(str(model_dir), dtype=torch.bfloat16).cuda().eval()
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(0, min(cfg.vocab_size, 50000), (args.len,), generator=gen)

    # What transformers' fp32 run really computes: matmul precision and the RoPE it applies, vs
    # float64 from the config's theta.
    rot = model.model.rotary_emb
    print(f"tf32 matmul {torch.backends.cuda.matmul.allow_tf32}, float32 matmul precision "
          f"{torch.get_float32_matmul_precision()}; rope_parameters "
          f"{getattr(cfg, 'rope_parameters', None)}; rope_theta {getattr(cfg, 'rope_theta', None)}; "
          f"attention_scaling {getattr(rot, 'attention_scaling', None)}", flush=True)
    theta = (getattr(cfg, "rope_parameters", None) or {}).get("rope_theta") or cfg.rope_theta
    hd = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    inv64 = 1.0 / (float(theta) ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
    pos = torch.arange(args.len, dtype=torch.float64)
    cos64 = torch.cos(pos[:, None] * inv64[None, :])
    with torch.no_grad():
        x = torch.zeros(1, args.len, hd, device="cuda", dtype=torch.float32)
        cos_hf, _ = rot(x, torch.arange(args.len, device="cuda")[None])
    print(f"inv_freq max rel diff vs float64: "
          f"{float(((rot.inv_freq.double().cpu() - inv64) / inv64).abs().max()):.3e}; "
          f"HF cos (fp32 run) max abs diff vs float64: "
          f"{float((cos_hf[0, :, :hd // 2].double().cpu() - cos64).abs().max()):.3e}", flush=True)

    results = {"hf_bf16": capture(model, ids)}
    del model
    model = cls.from_pretrained(str(model_dir), dtype=torch.float32).cuda().eval()
    results["hf_fp32_cuda"] = capture(model, ids)
    model = model.cpu()
    ref = capture(model, ids, device="cpu")  # no TF32 or fused-kernel question on the CPU
    del model
    torch.cuda.empty_cache()
    request = json.dumps({"ids": ids.tolist()}) + "\n"
    for backend in args.backends.split(","):
        dump = args.out / f"acts-{backend}.safetensors"
        run = subprocess.run([args.score, "--model", str(model_dir), "--backend", backend,
                              "--chunk-tokens", str(args.len), "--top-k", "0",
                              "--dump-activations", str(dump)],
                             input=request, capture_output=True, text=True)
        if run.returncode != 0:
            print(f"xserv-score --backend {backend} failed:\n{run.stderr[-2000:]}", flush=True)
            continue
        acts = read_safetensors(dump)
        reply = json.loads(run.stdout.splitlines()[0])
        lp = torch.tensor([x for x in reply["logprobs"][1:]])
        acts["token_logprobs"] = lp
        results[backend] = acts
    ref_lp = ref["logprobs"][torch.arange(args.len - 1), ids[1:]]
    ref["token_logprobs"] = ref_lp
    for hf in ("hf_bf16", "hf_fp32_cuda"):
        results[hf]["token_logprobs"] = \
            results[hf]["logprobs"][torch.arange(args.len - 1), ids[1:]]

    names = sorted((n for n in ref if n not in ("logprobs", "token_logprobs")), key=order_key)
    columns = list(results)
    table = {}
    print("activation".ljust(22) + "".join(c.rjust(14) for c in columns), flush=True)
    for name in names + ["token_logprobs"]:
        row = {}
        for c in columns:
            x = results[c].get(name)
            if x is None or x.shape != ref[name].shape:
                row[c] = None
                continue
            if name == "token_logprobs":  # mean absolute logprob difference, nats
                row[c] = float((x - ref[name]).abs().mean())
            else:
                row[c] = float((x - ref[name]).norm() / ref[name].norm().clamp_min(1e-30))
        table[name] = row
        print(name.ljust(22) + "".join(
            (f"{row[c]:14.3e}" if row[c] is not None else "             -") for c in columns))
    (args.out / "bisect.json").write_text(json.dumps(
        {"arch": args.arch, "layers": cfg.num_hidden_layers, "len": args.len, "table": table},
        indent=1))


if __name__ == "__main__":
    main()
