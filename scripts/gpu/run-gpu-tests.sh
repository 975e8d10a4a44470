#!/usr/bin/env bash
# Runs on the GPU host: prints the device, then every bundled GoogleTest binary (*_test), with
# XML reports and logs under $OUT. Exits non-zero if any test fails or no test ran.
# Usage: scripts/gpu/run-gpu-tests.sh [GTEST_FILTER]
set -uo pipefail
source "$(dirname "$0")/env.sh"
filter=${1:-*}

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "host: $(hostname)  commit: $(git -C "$XSERV_ROOT" rev-parse HEAD 2>/dev/null || echo unknown)"
  nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader 2>&1
} | tee "$OUT/device.txt"

failed=0
ran=0
summary=()
for bin in "$XSERV_ROOT"/.bundle/bin/*_test; do
  [[ -x $bin ]] || continue
  name=$(basename "$bin")
  start=$(date +%s%N)
  "$bin" --gtest_filter="$filter" --gtest_output="xml:$OUT/$name.xml" >"$OUT/$name.log" 2>&1
  rc=$?
  ms=$((($(date +%s%N) - start) / 1000000))
  tests=$(grep -c '^\[       OK \]' "$OUT/$name.log")
  skipped=$(grep -c '^\[  SKIPPED \]' "$OUT/$name.log")
  fails=$(grep -c '^\[  FAILED  \]' "$OUT/$name.log")
  ran=$((ran + tests))
  ((rc != 0)) && failed=1 && tail -30 "$OUT/$name.log"
  summary+=("$(printf '%-28s rc=%-3d ok=%-4d skipped=%-4d failed=%-4d %6d ms' "$name" "$rc" "$tests" "$skipped" "$fails" "$ms")")
done

echo
printf '%s\n' "${summary[@]}" | tee "$OUT/summary.txt"
((ran > 0)) || { echo "no GPU test ran" >&2; exit 1; }
exit $failed
