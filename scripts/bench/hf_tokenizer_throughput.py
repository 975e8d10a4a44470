#!/usr/bin/env python3
"""HF `tokenizers` single-thread encode throughput, the reference for xserv-tokenizer-bench.

Usage: python3 scripts/bench/hf_tokenizer_throughput.py --assets .assets [--repeats 5]
Encodes .assets/text/moby-dick.txt with each tokenizer in the two modes xserv-tokenizer-bench
reports: the whole text as one string, and paragraph by paragraph (split on blank lines, one
encode call each); prints MB/s (best of N) and the token count.
"""
import argparse
import json
import os
import platform
import time
from pathlib import Path

os.environ["RAYON_NUM_THREADS"] = "1"        # single thread, like our benchmark
os.environ["TOKENIZERS_PARALLELISM"] = "false"


def main() -> None:
    from tokenizers import Tokenizer, __version__
    ap = argparse.ArgumentParser()
    ap.add_argument("--assets", type=Path, required=True)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    text = (args.assets / "text" / "moby-dick.txt").read_text(encoding="utf-8")
    size_mb = len(text.encode("utf-8")) / 1e6
    # Same split as xserv-tokenizer-bench: each paragraph keeps its trailing blank line.
    paragraphs, start = [], 0
    while start < len(text):
        end = text.find("\n\n", start)
        end = len(text) if end < 0 else end + 2
        paragraphs.append(text[start:end])
        start = end
    results = {"tokenizers_version": __version__, "cpu": platform.processor() or platform.machine(),
               "text_mb": size_mb, "mb_per_s": {}, "mb_per_s_per_paragraph": {},
               "num_tokens": {}}
    for name in ["qwen3", "gpt-oss", "llama3", "gpt2"]:
        tok = Tokenizer.from_file(str(args.assets / "tokenizers" / name / "tokenizer.json"))
        best = float("inf")
        for _ in range(args.repeats):
            start = time.perf_counter()
            ids = tok.encode(text, add_special_tokens=False).ids
            best = min(best, time.perf_counter() - start)
        results["mb_per_s"][name] = round(size_mb / best, 2)
        best_paragraphs = float("inf")
        for _ in range(args.repeats):
            start = time.perf_counter()
            for p in paragraphs:
                tok.encode(p, add_special_tokens=False)
            best_paragraphs = min(best_paragraphs, time.perf_counter() - start)
        results["mb_per_s_per_paragraph"][name] = round(size_mb / best_paragraphs, 2)
        results["num_tokens"][name] = len(ids)
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
