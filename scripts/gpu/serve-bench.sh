#!/usr/bin/env bash
# On the GPU host: serving numbers of one architecture through the whole stack, in one call and
# one server start (loading gpt-oss-20b costs minutes): decode at batch 1 (c=1), throughput at
# each CONCURRENCY level (INPUT_LEN in / OUTPUT_LEN out, ignore_eos), and TTFT of single
# TTFT_LEN-token prompts on an idle server. Every step prints as it goes (a timed-out device call
# still leaves what finished) and writes xserv-bench JSON to $OUT/serve-bench-ARCH-*.json.
# Usage: serve-bench.sh [qwen3-8b|llama3-8b|gpt2|gpt-oss-20b]
# Env: CONCURRENCY=1,64,256 INPUT_LEN=128 OUTPUT_LEN=512 TTFT_LEN=2048 TTFT_REQUESTS=5
#      MODEL_DIR= (reuse an HF directory; else e2e_reference.py --model-only builds one)
#      BACKEND=cuda (cpu runs the same flow on a development machine) WORKER_ARGS= LEVEL_TIMEOUT_S=300
#      SUPERVISOR_ARGS= (e.g. "--tp 2 --devices 0,1"), TAG= (suffix of the output names)
#      FP8=1 (the model in the HF FP8 layout; e2e_reference.py --fp8)
set -uo pipefail
source "$(dirname "$0")/env.sh"
cd "$XSERV_ROOT"
arch=${1:-qwen3-8b}
BIN=$XSERV_ROOT/${BIN_DIR:-.bundle/bin}
port=${PORT:-18080}
t0=$(date +%s)
note() { echo "[serve-bench $arch +$(($(date +%s) - t0))s] $*"; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
model=$(model_of "$arch" "$work" 2>"$OUT/serve-bench-$arch-model.log") ||
  { note "model build failed (see serve-bench-$arch-model.log)"; exit 1; }
[[ -n ${MODEL_DIR:-} ]] || note "model built"
worker_args=(--worker-arg=--max-model-len --worker-arg=$((${TTFT_LEN:-2048} + 1024)))
for a in ${WORKER_ARGS:-}; do worker_args+=("--worker-arg=$a"); done
tagged=$arch${TAG:+-$TAG}
# shellcheck disable=SC2086
"$BIN/xserv-supervisor" --model "$model" --backend "${BACKEND:-cuda}" --http-port "$port" \
  --grpc-port $((port + 1)) --bin-dir "$BIN" --worker-base-port $((port + 20)) "${worker_args[@]}" \
  ${SUPERVISOR_ARGS:-} >"$OUT/serve-bench-$tagged-serve.log" 2>&1 &
sup=$!
for _ in $(seq 1200); do
  curl -sf "http://127.0.0.1:$port/ready" >/dev/null && break
  kill -0 $sup 2>/dev/null || { note "the stack exited"; tail -5 "$OUT/serve-bench-$tagged-serve.log"; exit 1; }
  sleep 0.5
done
note "serving"
grep -o "device memory before the KV cache.*" "$OUT/serve-bench-$tagged-serve.log" | sed "s/^/[$tagged] /"
nvidia-smi --query-gpu=index,memory.used --format=csv,noheader 2>/dev/null | sed "s/^/[$tagged] GPU /"
bench() {  # name, xserv-bench args...
  local name=$1; shift
  timeout "${LEVEL_TIMEOUT_S:-300}" "$BIN/xserv-bench" --url "http://127.0.0.1:$port" \
    --hardware "$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)" \
    --out "$OUT/serve-bench-$tagged-$name.json" --log-level warn "$@" 2>&1 | grep --line-buffered -v "^concurrency .*\[" 
  note "$name done (rc ${PIPESTATUS[0]})"
  # The leader's latest per-step host phases (logged every 10 s while it works).
  grep -o "engine: .*" "$OUT/serve-bench-$tagged-serve.log" | tail -1 | sed "s/^/[$tagged $name] /"
}
bench ttft --concurrency 1 --requests "${TTFT_REQUESTS:-5}" --warmup 1 \
  --input-len "${TTFT_LEN:-2048}" --output-len 1
IFS=, read -r -a levels <<<"${CONCURRENCY:-1,64,256}"
for c in "${levels[@]}"; do
  n=$((c * 2 > 8 ? c * 2 : 8))
  bench "c$c" --concurrency "$c" --requests $((n > 512 ? 512 : n)) \
    --input-len "${INPUT_LEN:-128}" --output-len "${OUTPUT_LEN:-512}"
done
kill -TERM $sup
wait $sup
note "stopped (supervisor exit $?)"
