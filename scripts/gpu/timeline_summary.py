#!/usr/bin/env python3
"""Summarises a kernel trace of decode steps (kernel-timeline.sh): splits it into steps at the
trace's last kernel name, and over the last --steps steps prints the step span, the sum of the
kernels' durations, the gaps, and per kernel name its calls, time and the idle gap before it,
then the critical path held by kernels that do not stream weights (--streaming): at batch 1 the
window in which the memory idles, which an L2 prefetch of the next weight may fill.
Reads nsys's cuda_gpu_trace CSV (start and duration) or ncu's CSV (durations only)."""
import argparse
import collections
import csv
import re
import sys


def short(name):
    if name.endswith(")"):  # drop the parameter list: the last balanced (...) group
        depth = 0
        for i in range(len(name) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(name[i], 0)
            if depth == 0:
                name = name[:i]
                break
    name = re.sub(r"^void ", "", name)
    name = name.replace("(anonymous namespace)::", "").replace("xserv::kernels::cuda::", "")
    return name[:90]


def read(path):
    """[(name, start_ns or None, duration_ns)] in launch order."""
    with open(path, newline="") as f:
        lines = f.read().splitlines()
    head = next(i for i, l in enumerate(lines) if l.startswith('"') or l.startswith("Start"))
    rows = list(csv.DictReader(lines[head:]))
    if rows and "Start (ns)" in rows[0]:
        return [(short(r["Name"]), int(r["Start (ns)"]), int(r["Duration (ns)"])) for r in rows]
    out, seen = [], {}
    for r in rows:  # ncu: one row per (kernel launch, metric)
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        value = float(r["Metric Value"].replace(",", ""))
        scale = {"nsecond": 1, "usecond": 1e3, "msecond": 1e6}.get(r["Metric Unit"], 1)
        if r["ID"] not in seen:
            seen[r["ID"]] = True
            out.append((short(r["Kernel Name"]), None, int(value * scale)))
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("csv")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--streaming", default=r"Gemv|gemm|Gemm|sm90_|cutlass|Moe.*Gemv",
                   help="regex of the kernel names that stream weights")
    a = p.parse_args()
    rows = [r for r in read(a.csv) if not r[0].startswith("[CUDA memset")]
    kernels = [r for r in rows if not r[0].startswith("[")]
    if not kernels:
        sys.exit("no kernels in " + a.csv)
    last = kernels[-1][0]
    ends = [i for i, r in enumerate(rows) if r[0] == last]
    if len(ends) < a.steps + 1:
        sys.exit(f"only {len(ends)} steps end in {last}")
    steps = [rows[ends[k - 1] + 1:ends[k] + 1] for k in range(len(ends) - a.steps, len(ends))]
    by_name = collections.OrderedDict()
    spans, busy = [], []
    for step in steps:
        busy.append(sum(d for _, _, d in step))
        if step[0][1] is not None:
            spans.append(step[-1][1] + step[-1][2] - step[0][1])
        prev_end = None
        for name, start, dur in step:
            e = by_name.setdefault(name, [0, 0, 0, 0])
            e[0] += 1
            e[1] += dur
            if start is not None and prev_end is not None:
                e[2] += max(0, start - prev_end)
                e[3] += max(0, start + dur - prev_end)
            elif start is not None:  # the step's first kernel
                e[3] += dur
            if start is not None:
                prev_end = max(prev_end or 0, start + dur)
    n = len(steps)
    print(f"{n} steps ending in {last}; {len(steps[-1])} launches per step")
    if spans:
        idle = sum(e[2] for e in by_name.values())  # the gaps before kernels
        print(f"step span {sum(spans) / n / 1e3:.1f} us, kernel durations {sum(busy) / n / 1e3:.1f} us"
              f" (they overlap under PDL), GPU idle between kernels {idle / n / 1e3:.1f} us")
    else:
        print(f"kernels busy {sum(busy) / n / 1e3:.1f} us per step (ncu replay: no gaps)")
    print(f"{'kernel':92} {'calls':>6} {'us/step':>9} {'us/call':>8} {'gap us/step':>11}"
          f" {'path us/step':>12}")
    for name, (calls, dur, gap, path) in sorted(by_name.items(), key=lambda kv: -kv[1][1]):
        print(f"{name:92} {calls / n:6.0f} {dur / n / 1e3:9.1f} {dur / calls / 1e3:8.2f}"
              f" {gap / n / 1e3:11.1f} {path / n / 1e3:12.1f}")
    if spans:
        streaming = re.compile(a.streaming)
        other = sum(e[3] for name, e in by_name.items() if not streaming.search(name))
        print(f"critical path outside weight-streaming kernels (--streaming): {other / n / 1e3:.1f}"
              f" us/step")


if __name__ == "__main__":
    main()
