#!/usr/bin/env bash
# On the GPU host: every kernel of a few graphed decode steps, in order, with its GPU start and
# duration, to see where a step's time goes beyond the op profile (which turns graphs off and
# adds event cost per op): the gaps between kernels, and the kernels themselves. Random weights
# of ARCH, xserv-engine-bench at one batch size. nsys when the host has it (graph nodes traced);
# else the bundle's CUPTI tracer (libxserv_kernel_trace.so, loaded by CUDA_INJECTION64_PATH: the
# same timeline, graph nodes included); else ncu, which replays each kernel alone (durations only,
# no gaps; TRACER=ncu forces it).
# Writes $OUT/timeline-ARCH-bBATCH.csv (nsys: cuda_gpu_trace; the tracer: the same columns; ncu:
# its CSV) and prints a summary by kernel name over the last decode steps
# (scripts/gpu/timeline_summary.py).
# Usage: kernel-timeline.sh [qwen3-8b|gpt-oss-20b|...] [batch, default 1]
# Env: PROMPT_LEN (default 128), GEN_LEN (16), STEPS (4), BENCH_FLAGS, MODEL_DIR, TRACER, TAG
# (a suffix of the csv's name), BENCH_BIN (another engine bench of the bundle, e.g. a base build).
set -uo pipefail
source "$(dirname "$0")/env.sh"
cd "$XSERV_ROOT"
arch=${1:-gpt-oss-20b}
batch=${2:-1}
work=$(mktemp -d)
model=$(model_of "$arch" "$work" 2>/dev/null) || exit 1  # MODEL_DIR: made earlier in the call
csv="$OUT/timeline-$arch-b$batch${TAG:+-$TAG}.csv"
bench=(".bundle/bin/${BENCH_BIN:-xserv-engine-bench}" --model "$model" --backend cuda
       --prompt-len "${PROMPT_LEN:-128}" --gen-len "${GEN_LEN:-16}" --batch "$batch" --repeats 1
       --batch-invariant false ${BENCH_FLAGS:-})
nsys=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)
if [[ -n $nsys ]]; then
  echo "nsys: $nsys"
  "$nsys" profile -o "$work/tl" --force-overwrite true --trace cuda --cuda-graph-trace node \
    "${bench[@]}" 2>&1 | tail -5
  "$nsys" stats --report cuda_gpu_trace --format csv --output "$work/tl" "$work/tl.nsys-rep" \
    >/dev/null 2>&1
  cp "$work"/tl_cuda_gpu_trace.csv "$csv"
elif [[ ${TRACER:-cupti} == cupti && -f .bundle/bin/libxserv_kernel_trace.so ]]; then
  cupti=$(find /usr/local/cuda/ -name 'libcupti.so*' 2>/dev/null | head -1)
  echo "CUPTI tracer (${cupti:-libcupti not found})"
  LD_LIBRARY_PATH="${cupti:+$(dirname "$cupti"):}$LD_LIBRARY_PATH" \
    CUDA_INJECTION64_PATH="$PWD/.bundle/bin/libxserv_kernel_trace.so" XSERV_KERNEL_TRACE="$csv" \
    "${bench[@]}" 2>&1 | tail -3
else
  ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
  echo "no nsys; $ncu (per-kernel replay: durations, no gaps)"
  # NCU_FLAGS, e.g. "--cache-control none": keep L2 between kernels as in a real step.
  "$ncu" --graph-profiling node --clock-control none --metrics gpu__time_duration.sum --csv ${NCU_FLAGS:-} \
    "${bench[@]}" >"$csv" 2>"$work/ncu.err"
  tail -3 "$work/ncu.err"
fi
python3 scripts/gpu/timeline_summary.py "$csv" --steps "${STEPS:-4}"
rm -rf "$work"
