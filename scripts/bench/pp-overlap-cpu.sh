#!/usr/bin/env bash
# Pipeline parallelism on the CPU backend: output tok/s of one model served as PP=1, PP=2 one
# step at a time (--pp-overlap=false) and PP=2 with one step in flight per stage (the default),
# every worker rank on one thread, through supervisor + router, measured by xserv-bench.
# Usage: scripts/bench/pp-overlap-cpu.sh [OUT_DIR]   (after scripts/build.sh; needs the tokenizers)
# Env: PRESET (small), LAYERS (8), CONCURRENCY (16), REQUESTS (48), IN (64), OUT_LEN (64).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=$root/build/bin
out=${1:-$(mktemp -d)}
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$bin/xserv-make-model" --arch qwen3 --preset "${PRESET:-small}" --seed 1 \
  --num-layers "${LAYERS:-8}" --tokenizer "$root/.assets/tokenizers/qwen3" --out "$work/model" \
  --log-level warn
run() {  # name, supervisor args...
  local name=$1; shift
  local port=$((18000 + RANDOM % 2000))
  "$bin/xserv-supervisor" --model "$work/model" --http-port "$port" --grpc-port $((port + 50)) \
    --bin-dir "$bin" --worker-base-port $((port + 100)) --worker-arg=--threads \
    --worker-arg=1 "$@" >"$out/$name-serve.log" 2>&1 &
  local sup=$!
  for _ in $(seq 300); do
    curl -sf "http://127.0.0.1:$port/ready" >/dev/null && break
    sleep 0.5
  done
  "$bin/xserv-bench" --url "http://127.0.0.1:$port" --concurrency "${CONCURRENCY:-16}" \
    --requests "${REQUESTS:-48}" --input-len "${IN:-64}" --output-len "${OUT_LEN:-64}" \
    --hardware "$(nproc) cores $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)" \
    --out "$out/$name.json" --log-level warn | tail -3
  curl -s "http://127.0.0.1:$port/metrics" | grep pipeline_overlapped || true
  ps -o pid=,comm=,time= --ppid $sup --pid $sup | sed "s/^/  cpu: /"
  kill -TERM $sup
  wait $sup || true
}
run pp1
run pp2-serial --pp 2 --worker-arg=--pp-overlap=false
run pp2-overlap --pp 2
echo "results in $out"
