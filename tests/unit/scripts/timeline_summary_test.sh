#!/usr/bin/env bash
# scripts/gpu/timeline_summary.py on a CUPTI-tracer-shaped trace of three steps of three kernels:
# the second kernel starts (PDL) 5 us before the first ends, the third after a 5 us gap. Checks
# the step split, the demangled short names, the idle gaps and each kernel's critical-path share
# (which add up to the step span). Usage: timeline_summary_test.sh SOURCE_DIR
set -euo pipefail
command -v python3 >/dev/null || exit 77
src=$1
out=$(python3 "$src/scripts/gpu/timeline_summary.py" "$src/tests/unit/scripts/timeline_fixture.csv" --steps 2)
echo "$out"
fail() { echo "FAIL: $*" >&2; exit 1; }
grep -q "^2 steps ending in ArgMaxMergeKernel; 3 launches per step$" <<<"$out" || fail "step split"
grep -q "step span 25.0 us, kernel durations 25.0 us .*GPU idle between kernels 5.0 us" <<<"$out" ||
  fail "span and idle"
# name, calls, us/step, us/call, gap us/step, path us/step
grep -Eq "^NormKernel<2, false> +1 +10.0 +10.00 +0.0 +10.0$" <<<"$out" || fail "first kernel"
grep -Eq "^Gemv +1 +10.0 +10.00 +0.0 +5.0$" <<<"$out" || fail "overlapped kernel's path"
grep -Eq "^ArgMaxMergeKernel +1 +5.0 +5.00 +5.0 +10.0$" <<<"$out" || fail "gap counted on the path"
echo PASS
