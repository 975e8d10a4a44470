#!/usr/bin/env bash
# On the GPU host: ncu's detailed sections for one kernel of a graphed decode step, the
# questions a timeline cannot answer (how much of DRAM bandwidth it reaches, its occupancy, what
# its warps stall on). Random weights of ARCH, xserv-engine-bench at one batch size with
# PROMPT_LEN-token prompts (default 384: the mean context of the c=256 serving benchmark).
# Usage: ncu-kernel.sh ARCH BATCH KERNEL_REGEX   e.g. ncu-kernel.sh qwen3-8b 256 DecodeAttention
# Env: MODEL_DIR (a model made earlier in the call), FP8=1, BENCH_FLAGS, SKIP (launches of the
#      kernel skipped first, default 72: past prefill and warm-up), COUNT (profiled, default 2),
#      SECTIONS (ncu --section names, default below). Writes $OUT/ncu-ARCH-bBATCH-KERNEL.txt.
set -uo pipefail
source "$(dirname "$0")/env.sh"
cd "$XSERV_ROOT"
arch=${1:?arch} batch=${2:?batch} kernel=${3:?kernel regex}
work=$(mktemp -d)
model=$(model_of "$arch" "$work" 2>/dev/null) || exit 1
sections=${SECTIONS:-SpeedOfLight MemoryWorkloadAnalysis Occupancy LaunchStats WarpStateStats SchedulerStats}
section_args=()
for s in $sections; do section_args+=(--section "$s"); done
out="$OUT/ncu-$arch-b$batch-$kernel.txt"
ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
# shellcheck disable=SC2086
"$ncu" --graph-profiling node --kernel-name "regex:$kernel" --launch-skip "${SKIP:-72}" \
  --launch-count "${COUNT:-2}" "${section_args[@]}" \
  .bundle/bin/xserv-engine-bench --model "$model" --backend cuda \
  --prompt-len "${PROMPT_LEN:-384}" --gen-len "${GEN_LEN:-8}" --batch "$batch" --repeats 1 \
  --batch-invariant false ${BENCH_FLAGS:-} >"$out" 2>&1
echo "ncu rc $? -> $out"
grep -E "^  [A-Za-z].*Kernel|Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Registers Per|Dynamic Shared|Stall|Warp Cycles Per Issued" "$out" | head -60
rm -rf "$work"
