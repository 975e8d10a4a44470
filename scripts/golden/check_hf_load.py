#!/usr/bin/env python3
"""Loads directories written by xserv-make-model with HF transformers (on the GPU host, which has
torch and transformers) and writes, per directory, the loading report (missing / unexpected /
mismatched keys) and HF's log-probabilities for a fixed token sequence, to compare with
xserv-score on the same directories:

    python3 worker/tools/check_hf_load.py --out hf.json DIR...
    xserv-score --model DIR --top-k 1 < ids.jsonl   # ids.jsonl: the "ids" written to hf.json
"""
import argparse
import json

import torch
import transformers


def sequence(vocab, n):
    return [(i * 7919 + 13) % vocab for i in range(n)]


def check(path, n):
    with open(f"{path}/config.json") as f:
        config = json.load(f)
    kwargs = {}
    if config.get("quantization_config", {}).get("quant_method") == "mxfp4":
        kwargs["quantization_config"] = transformers.Mxfp4Config(dequantize=True)
    model, info = transformers.AutoModelForCausalLM.from_pretrained(
        path, torch_dtype=torch.float32, output_loading_info=True, attn_implementation="eager",
        **kwargs)
    model.float().eval()
    ids = sequence(config["vocab_size"], n)
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].float()
    lsm = torch.log_softmax(logits, dim=-1)
    return {
        "loading_info": {k: sorted(map(str, v)) for k, v in info.items()},
        "ids": ids,
        "logprobs": [None] + [lsm[i, ids[i + 1]].item() for i in range(n - 1)],
        "top1": [[int(lsm[i].argmax()), lsm[i].max().item()] for i in range(n)],
    }


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--tokens", type=int, default=80)
    parser.add_argument("dirs", nargs="+")
    args = parser.parse_args()
    results = {"transformers": transformers.__version__, "torch": torch.__version__}
    for path in args.dirs:
        try:
            results[path] = check(path, args.tokens)
        except Exception as e:  # report every directory, even after one fails
            results[path] = {"error": repr(e)}
        print(path, json.dumps(results[path].get("loading_info", results[path])))
    with open(args.out, "w") as f:
        json.dump(results, f)


if __name__ == "__main__":
    main()
