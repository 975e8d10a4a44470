#!/usr/bin/env bash
# On a two-GPU host: serve-bench.sh for one model in several replica layouts, one after another on
# the same random weights (built once): by default one GPU, TP=2 and PP=2 (issue 10's speed runs).
# Prints each layout's lines as they come; packs every JSON and server log into
# $OUT/layouts-bench-ARCH.tar.gz (the device tool returns few files).
# Usage: layouts-bench.sh [ARCH]   Env: LAYOUTS="tp1=|tp2=--tp 2 --devices 0,1|..." plus
#        serve-bench.sh's (CONCURRENCY, INPUT_LEN, OUTPUT_LEN, TTFT_LEN, WORKER_ARGS, ...).
set -uo pipefail
source "$(dirname "$0")/env.sh"
cd "$XSERV_ROOT"
arch=${1:-qwen3-8b}
tok=$(tokenizer_of "$arch") || exit 2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
t0=$(date +%s)
PYTHONUNBUFFERED=1 python3 scripts/gpu/e2e_reference.py --arch "$arch" \
  --tokenizer ".assets/tokenizers/$tok" --out "$work" --model-only >"$OUT/layouts-bench-$arch-model.log" 2>&1 ||
  { echo "model build failed"; tail -5 "$OUT/layouts-bench-$arch-model.log"; exit 1; }
echo "[layouts-bench] model built in $(($(date +%s) - t0)) s"
IFS='|' read -r -a layouts <<<"${LAYOUTS:-tp1=|tp2=--tp 2 --devices 0,1|pp2=--pp 2 --devices 0,1}"
for layout in "${layouts[@]}"; do
  TAG=${layout%%=*} SUPERVISOR_ARGS=${layout#*=} MODEL_DIR=$work/model \
    bash scripts/gpu/serve-bench.sh "$arch"
done
tar -C "$OUT" -czf "$OUT/layouts-bench-$arch.tar.gz" --remove-files \
  $(cd "$OUT" && ls serve-bench-"$arch"-* layouts-bench-"$arch"-model.log 2>/dev/null)
echo "[layouts-bench] done in $(($(date +%s) - t0)) s"
