#!/usr/bin/env bash
# On the GPU host: an A/B of xserv-engine-bench binaries built from different trees (bundle them
# under other names, e.g. build/bin/xserv-engine-bench-old), on one random model of ARCH in one
# call: each binary decodes at BATCHES for each prompt length, twice, in turn, so drift between
# runs shows. Prints the bench's result rows under "== BINARY prompt LEN rep N" headers.
# Usage: ab-engine.sh ARCH BATCHES "BIN1 BIN2 ..." [PROMPT_LENS, default "128"]
# Env: GEN_LEN (default 64), BENCH_FLAGS (more xserv-engine-bench flags), FP8=1 (HF FP8 layout).
set -uo pipefail
source "$(dirname "$0")/env.sh"
cd "$XSERV_ROOT"
arch=$1
batches=$2
bins=$3
lens=${4:-128}
tok=$(tokenizer_of "$arch") || exit 2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 scripts/gpu/e2e_reference.py --arch "$arch" --tokenizer ".assets/tokenizers/$tok" \
  --out "$work" --model-only $([[ ${FP8:-0} == 1 ]] && echo --fp8) >/dev/null 2>&1 || exit 1
for len in $lens; do
  for rep in 1 2; do
    for bin in $bins; do
      echo "== $bin prompt $len rep $rep"
      # shellcheck disable=SC2086
      ".bundle/bin/$bin" --model "$work/model" --backend cuda --prompt-len "$len" \
        --gen-len "${GEN_LEN:-64}" --batch "$batches" --repeats 3 --batch-invariant false \
        ${BENCH_FLAGS:-} 2>&1 | grep -E "^ *[0-9]+ +[0-9]+ "
    done
  done
done
