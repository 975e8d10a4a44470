#!/usr/bin/env python3
"""Helpers of scripts/gpu/tools-h200.sh (standard library only).

  wait-ready URL TIMEOUT_S          poll URL/ready until 200 (exit 1 on timeout)
  cut-text SRC DST CHARS            the first CHARS characters of a UTF-8 text
  merge-bench --out J --svg S L...  one results JSON (docs/benchmarks/results schema) and the
                                    xserv-bench chart from per-level xserv-bench --out files
  compare-ppl --ours J --hf J ...   xserv-perplexity vs transformers: relative difference of the
                                    mean NLL (log-perplexity); exit 1 above --max-rel-nll or when
                                    the tokenizations differ
"""
import argparse
import json
import math
import sys
import time
import urllib.request
from pathlib import Path


def wait_ready(url, timeout_s, pid=None):
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        try:
            if urllib.request.urlopen(f"{url}/ready", timeout=2).status == 200:
                return 0
        except Exception:
            pass
        if pid is not None:
            try:
                import os
                os.kill(pid, 0)
            except OSError:
                print(f"process {pid} exited before the server was ready", file=sys.stderr)
                return 1
        time.sleep(1)
    return 1


def cut_text(src, dst, chars):
    text = Path(src).read_bytes().decode("utf-8")
    Path(dst).write_bytes(text[:chars].encode("utf-8"))


def chart(levels, label_key):
    """The same SVG as tools/bench/chart.cc: output tok/s against TPOT p50, one point per level."""
    w, h, pad = 640.0, 400.0, 60.0
    max_x = max([1e-9] + [m["output_tok_s"] for m in levels])
    max_y = max([1e-9] + [m["tpot_ms_p50"] for m in levels])
    px = lambda x: pad + x / max_x * (w - 2 * pad)
    py = lambda y: h - pad - y / max_y * (h - 2 * pad)
    points, marks = "", ""
    for m in levels:
        x, y = px(m["output_tok_s"]), py(m["tpot_ms_p50"])
        points += f"{x:.1f},{y:.1f} "
        marks += (f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4"/><text x="{x + 6:.1f}" '
                  f'y="{y - 6:.1f}">{label_key} {json.dumps(m[label_key])}</text>\n')
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{w:.0f}" height="{h:.0f}" '
            f'font-family="sans-serif" font-size="12">\n'
            f'<line x1="{pad:.0f}" y1="{h - pad:.0f}" x2="{w - pad:.0f}" y2="{h - pad:.0f}" '
            f'stroke="black"/>\n'
            f'<line x1="{pad:.0f}" y1="{pad:.0f}" x2="{pad:.0f}" y2="{h - pad:.0f}" '
            f'stroke="black"/>\n'
            f'<text x="{w / 2 - 60:.0f}" y="{h - 20:.0f}">output tok/s (max {max_x:.1f})</text>\n'
            f'<text x="4" y="{pad - 20:.0f}">TPOT p50 ms (max {max_y:.2f})</text>\n'
            f'<polyline fill="none" stroke="steelblue" points="{points}"/>\n{marks}</svg>\n')


def merge_bench(args):
    runs = [json.loads(Path(p).read_text()) for p in args.levels]
    if not runs:
        raise SystemExit("merge-bench: no level results")
    merged = dict(runs[0])
    config = dict(runs[0]["config"])
    config["concurrency"] = [c for r in runs for c in r["config"]["concurrency"]]
    config["requests_per_level"] = [r["config"]["requests_per_level"] for r in runs]
    config["warmup"] = sum(r["config"]["warmup"] for r in runs)
    config["seed"] = [r["config"]["seed"] for r in runs]  # level i draws with seed + 1
    config["runner"] = "scripts/gpu/tools-h200.sh (one xserv-bench call per level)"
    merged["config"] = config
    merged["metrics"] = [m for r in runs for m in r["metrics"]]
    merged["date"] = runs[-1]["date"]
    if args.bundle_commit:
        merged["bundle_commit"] = args.bundle_commit
    Path(args.out).write_text(json.dumps(merged, indent=1) + "\n")
    Path(args.svg).write_text(chart(merged["metrics"], "concurrency"))
    failed = sum(m.get("failed", 0) for m in merged["metrics"])
    for m in merged["metrics"]:
        print(f"concurrency {m['concurrency']:>4}: {m['completed']}/{m['requests']} done, "
              f"{m['output_tok_s']:.1f} out tok/s, TPOT p50 {m['tpot_ms_p50']:.2f} ms, "
              f"TTFT p50 {m['ttft_ms_p50']:.1f} ms, {m['duration_s']:.1f} s")
    return 1 if failed else 0


def server_ids(url, text):
    body = json.dumps({"prompt": text}).encode()
    req = urllib.request.Request(f"{url}/tokenize", data=body,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())["tokens"]


def compare_ppl(args):
    ours = json.loads(Path(args.ours).read_text())
    hf = json.loads(Path(args.hf).read_text())
    hf32 = json.loads(Path(args.hf_fp32).read_text()) if args.hf_fp32 else None
    rel = lambda a, b: abs(a - b) / abs(b) if b else math.inf
    report = {
        "ours": ours, "hf_bf16": hf, "hf_fp32": hf32,
        "perplexity_ours": ours["perplexity"], "perplexity_hf": hf["perplexity"],
        "mean_nll_ours": ours["mean_nll"], "mean_nll_hf": hf["mean_nll"],
        "rel_diff_mean_nll": rel(ours["mean_nll"], hf["mean_nll"]),
        "rel_diff_perplexity": rel(ours["perplexity"], hf["perplexity"]),
        "max_rel_diff_mean_nll": args.max_rel_nll,
        "same_tokens_scored": ours["tokens_scored"] == hf["tokens_scored"],
    }
    if hf32:
        # What bf16 rounding alone moves the mean NLL (HF bf16 vs HF fp32), the yardstick for ours.
        report["rel_diff_mean_nll_hf_bf16_vs_fp32"] = rel(hf["mean_nll"], hf32["mean_nll"])
        report["rel_diff_mean_nll_ours_vs_hf_fp32"] = rel(ours["mean_nll"], hf32["mean_nll"])
    if args.hf_ids and args.url and args.text:
        ref_ids = json.loads(Path(args.hf_ids).read_text())
        try:
            got = server_ids(args.url, Path(args.text).read_bytes().decode("utf-8"))
            first = next((i for i, (a, b) in enumerate(zip(got, ref_ids)) if a != b),
                         None if len(got) == len(ref_ids) else min(len(got), len(ref_ids)))
            report["tokenization"] = {"server_tokens": len(got), "hf_tokens": len(ref_ids),
                                      "identical": first is None, "first_difference": first}
        except Exception as e:  # the comparison of perplexities still stands
            report["tokenization"] = {"error": str(e)}
    problems = []
    if not report["rel_diff_mean_nll"] <= args.max_rel_nll:
        problems.append(f"mean NLL differs by {report['rel_diff_mean_nll']:.3e} relative "
                        f"(> {args.max_rel_nll})")
    if not report["same_tokens_scored"]:
        problems.append(f"tokens scored differ: ours {ours['tokens_scored']}, "
                        f"HF {hf['tokens_scored']}")
    if report.get("tokenization", {}).get("identical") is False:
        problems.append(f"tokenization differs from position "
                        f"{report['tokenization']['first_difference']}")
    report["pass"] = not problems
    report["problems"] = problems
    Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    print(f"perplexity: ours {ours['perplexity']:.6g}, transformers bf16 {hf['perplexity']:.6g}"
          + (f", transformers fp32 {hf32['perplexity']:.6g}" if hf32 else ""))
    print(f"mean NLL: ours {ours['mean_nll']:.6f}, transformers bf16 {hf['mean_nll']:.6f}; "
          f"relative difference {report['rel_diff_mean_nll']:.3e} (limit {args.max_rel_nll})"
          + (f"; HF bf16 vs fp32 {report['rel_diff_mean_nll_hf_bf16_vs_fp32']:.3e}" if hf32 else ""))
    if "tokenization" in report:
        print(f"tokenization: {report['tokenization']}")
    print("PASS" if not problems else "FAIL: " + "; ".join(problems))
    return 0 if not problems else 1


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("wait-ready")
    p.add_argument("url")
    p.add_argument("timeout_s", type=float)
    p.add_argument("--pid", type=int)
    p = sub.add_parser("cut-text")
    p.add_argument("src")
    p.add_argument("dst")
    p.add_argument("chars", type=int)
    p = sub.add_parser("merge-bench")
    p.add_argument("--out", required=True)
    p.add_argument("--svg", required=True)
    p.add_argument("--bundle-commit")
    p.add_argument("levels", nargs="+")
    p = sub.add_parser("compare-ppl")
    p.add_argument("--ours", required=True)
    p.add_argument("--hf", required=True)
    p.add_argument("--hf-fp32")
    p.add_argument("--hf-ids")
    p.add_argument("--url")
    p.add_argument("--text")
    p.add_argument("--max-rel-nll", type=float, default=0.01)
    p.add_argument("--out", required=True)
    args = ap.parse_args()
    if args.cmd == "wait-ready":
        return wait_ready(args.url, args.timeout_s, args.pid)
    if args.cmd == "cut-text":
        return cut_text(args.src, args.dst, args.chars)
    if args.cmd == "merge-bench":
        return merge_bench(args)
    return compare_ppl(args)


if __name__ == "__main__":
    sys.exit(main() or 0)
