#!/usr/bin/env bash
# Runs on the GPU host: prints the device, then every bundled GoogleTest binary (*_test), with
# logs and XML reports packed into $OUT/gpu-tests.tar.gz (the device tool returns at most 8
# files), and a summary in $OUT/summary.txt. Exits non-zero if any test fails or no test ran.
# Usage: scripts/gpu/run-gpu-tests.sh [GTEST_FILTER]
# By default only the binaries with GPU tests (cuda_*, nccl_*, model_fp8_test): the CPU-only ones
# start servers from the build tree, which the host does not have. ALL=1 runs every *_test.
set -uo pipefail
source "$(dirname "$0")/env.sh"
filter=${1:-*}

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "host: $(hostname)  commit: $XSERV_COMMIT"
  nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader 2>&1
} | tee "$OUT/device.txt"

LOGS=$(mktemp -d)/gpu-tests
mkdir -p "$LOGS"
failed=0
ran=0
summary=()
for bin in "$XSERV_ROOT"/.bundle/bin/*_test; do
  [[ -x $bin ]] || continue
  name=$(basename "$bin")
  [[ ${ALL:-0} == 1 || $name == cuda_* || $name == nccl_* || $name == model_fp8_test ]] || continue
  start=$(date +%s%N)
  "$bin" --gtest_filter="$filter" --gtest_output="xml:$LOGS/$name.xml" >"$LOGS/$name.log" 2>&1
  rc=$?
  ms=$((($(date +%s%N) - start) / 1000000))
  tests=$(grep -c '^\[       OK \]' "$LOGS/$name.log")
  skipped=$(grep -c '^\[  SKIPPED \]' "$LOGS/$name.log")
  fails=$(grep -c '^\[  FAILED  \]' "$LOGS/$name.log")
  ran=$((ran + tests))
  ((rc != 0)) && failed=1 && tail -30 "$LOGS/$name.log"
  summary+=("$(printf '%-28s rc=%-3d ok=%-4d skipped=%-4d failed=%-4d %6d ms' "$name" "$rc" "$tests" "$skipped" "$fails" "$ms")")
done

tar -C "$(dirname "$LOGS")" -czf "$OUT/gpu-tests.tar.gz" gpu-tests
echo
printf '%s\n' "${summary[@]}" | tee "$OUT/summary.txt"
((ran > 0)) || { echo "no GPU test ran" >&2; exit 1; }
exit $failed
