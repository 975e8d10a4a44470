#!/usr/bin/env bash
# On the GPU host: a random model of a real architecture (transformers, bf16) timed with
# xserv-engine-bench on the CUDA backend (no scheduler, no HTTP), with the heuristic's matmuls and
# with batch-invariant ones (xserv-worker --batch-invariant; REFERENCE_ROWS lists the reference m
# values to try; MODES=heuristic skips the batch-invariant runs; BENCH_FLAGS adds flags, e.g.
# --profile-ops; PROMPT_LEN, default 128, and GEN_LEN, default 64, e.g. PROMPT_LEN=2048 GEN_LEN=4
# with --profile-ops for a long prompt's prefill by op; FP8=1 writes the model in the HF FP8
# layout, qwen3-8b / llama3-8b; BINS compares binaries, below). Writes $OUT/engine-bench-ARCH.txt
# (TAG=x: engine-bench-ARCH-x.txt; a name taken by an earlier run of the call gets -2, -3, ...).
# Usage: engine-bench.sh [qwen3-8b|llama3-8b|gpt2|gpt-oss-20b] [batches, default 1,8,32]
set -uo pipefail
source "$(dirname "$0")/env.sh"
cd "$XSERV_ROOT"
arch=${1:-qwen3-8b}
batches=${2:-1,8,32}
work=$(mktemp -d)
export PYTHONUNBUFFERED=1
model=$(model_of "$arch" "$work" 2>/dev/null) || exit 1  # MODEL_DIR: made earlier in the call
result="$OUT/engine-bench-$arch${TAG:+-$TAG}.txt"
for n in $(seq 2 99); do  # never overwrite an earlier run's table in the same call
  [[ -e $result ]] || break
  result="$OUT/engine-bench-$arch${TAG:+-$TAG}-$n.txt"
done
# VARIANTS="name=FLAGS|name2=FLAGS2": the heuristic mode once per variant (its flags after
# BENCH_FLAGS; ROUNDS times, default 1), on the same weights, then a table of decode ms/step by
# batch (e.g. VARIANTS="base=|fused=--fuse-qk-norm-rope true|tuned=--gemm-autotune true"). A name
# of the form name@BINARY runs that bundled binary instead (flags and binaries in one call, e.g.
# VARIANTS="main=|p16=--l2-prefetch-mb 16|gemv@xserv-engine-bench-gemv=").
# BINS="xserv-engine-bench xserv-engine-bench-old": the heuristic mode with each bundled binary
# (built from different trees), in turn, ROUNDS times (default 2) so drift between runs shows:
# the variants BIN@BIN=.
if [[ -n ${BINS:-} && -z ${VARIANTS:-} ]]; then
  VARIANTS=$(for bin in $BINS; do printf '%s@%s=|' "$bin" "$bin"; done)
  VARIANTS=${VARIANTS%|}
  ROUNDS=${ROUNDS:-2}
fi
bench() {  # flags...
  ".bundle/bin/${BIN:-xserv-engine-bench}" --model "$model" --backend cuda \
    --prompt-len "${PROMPT_LEN:-128}" --gen-len "${GEN_LEN:-64}" --batch "$batches" --repeats 3 \
    "$@" 2>&1 | grep --line-buffered -v "^\s*$"
}
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ) commit: $XSERV_COMMIT"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  if [[ -n ${VARIANTS:-} ]]; then
    IFS='|' read -r -a variants <<<"$VARIANTS"
    for round in $(seq "${ROUNDS:-1}"); do
      for v in "${variants[@]}"; do
        name=${v%%=*}
        bin=xserv-engine-bench
        [[ $name == *@* ]] && bin=${name#*@}
        echo "== variant ${name%@*}#$round: $bin ${v#*=}"
        # shellcheck disable=SC2086
        BIN=$bin bench --batch-invariant false ${BENCH_FLAGS:-} ${v#*=}
      done
    done
  else
    for mode in ${MODES:-heuristic ${REFERENCE_ROWS:-256}}; do
      if [[ $mode == heuristic ]]; then flags=(--batch-invariant false)
      else flags=(--batch-invariant true --invariant-reference-rows "$mode"); fi
      # shellcheck disable=SC2086
      bench "${flags[@]}" ${BENCH_FLAGS:-}
    done
  fi
} | tee "$result"
if [[ -n ${VARIANTS:-} ]]; then  # variant, batch, prefill tok/s, decode ms/step
  awk '/^== variant/ {v = $3; sub(":", "", v)} /^ *[0-9]+ +[0-9]+ +[0-9]+ +[0-9.]+ +[0-9.]+ +[0-9.]+$/ {
         printf "%-12s b=%-5s prefill %10s tok/s  decode %7s ms/step\n", v, $1, $4, $6}' \
    "$result"
fi
rm -rf "$work"
