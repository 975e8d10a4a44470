#!/usr/bin/env bash
# On the GPU host: random weights of a real architecture (transformers, bf16) served by the whole
# stack (supervisor -> router -> worker on CUDA), checked against transformers on the same weights
# (prompt logprobs, teacher-forced top-1, greedy prefix, a streaming chat). Results under $OUT.
# Usage: e2e-cuda.sh [qwen3-8b|llama3-8b|gpt2|gpt-oss-20b] [prompts] [len]
# LAYERS=N builds only the first N layers (gpt-oss-20b only: e2e_reference.py --layers).
# FP8=1 writes the model in the HF FP8 layout (qwen3-8b, llama3-8b: e2e_reference.py --fp8).
# KV_FP8=1 also scores transformers with FP8-rounded keys and values (e2e_reference.py --kv-fp8),
# the yardstick of a variant served with --kv-cache-dtype fp8 (ours_vs_hf_fp8kv_* in its JSON).
# WORKER_ARGS adds worker flags, e.g. "--flash-prefill true" or "--tp-cuda-graphs true".
# BATCH_INVARIANT=true serves with xserv-worker --batch-invariant (the determinism check's mode).
# SUPERVISOR_ARGS adds supervisor flags, e.g. "--tp 2 --devices 0,1" on a two-GPU host.
# VARIANTS="name=SUPERVISOR_ARGS;WORKER_ARGS|name2=...": serve the same weights once per variant
# against the one reference (e.g. "base=;|flash=;--flash-prefill true|tp2g=--tp 2 --devices
# 0,1;--tp-cuda-graphs true"), writing e2e-ARCH-NAME.json each; without it one variant from
# SUPERVISOR_ARGS and WORKER_ARGS, written as e2e-ARCH.json.
set -uo pipefail
source "$(dirname "$0")/env.sh"
cd "$XSERV_ROOT"
arch=${1:-qwen3-8b}
prompts=${2:-32}
len=${3:-256}
tok=$(tokenizer_of "$arch") || exit 2
work=$(mktemp -d)
export PYTHONUNBUFFERED=1
start=$(date +%s)
python3 scripts/gpu/e2e_reference.py --arch "$arch" --tokenizer ".assets/tokenizers/$tok" \
  --out "$work" --prompts "$prompts" --len "$len" ${LAYERS:+--layers "$LAYERS"} \
  $([[ ${FP8:-0} == 1 ]] && echo --fp8) $([[ ${KV_FP8:-0} == 1 ]] && echo --kv-fp8) 2>&1 \
  | tee "$OUT/e2e-$arch-reference.log" | tail -3
nvidia-smi --query-gpu=index,name,memory.used --format=csv,noheader
echo "reference: $(($(date +%s) - start)) s"
port=18080

# serve_and_compare NAME SUPERVISOR_ARGS WORKER_ARGS: one server start, one comparison.
serve_and_compare() {
  local name=$1 sup_args=$2 worker_args=$3 suffix=${1:+-$1}
  local extra=()
  for a in $worker_args; do extra+=("--worker-arg=$a"); done
  # shellcheck disable=SC2086
  .bundle/bin/xserv-supervisor --model "$work/model" --backend cuda --http-port $port $sup_args \
    --bin-dir "$XSERV_ROOT/.bundle/bin" --worker-base-port 18100 \
    --worker-arg=--max-model-len --worker-arg=4096 \
    --worker-arg=--batch-invariant --worker-arg="${BATCH_INVARIANT:-false}" "${extra[@]}" \
    >"$OUT/e2e-$arch$suffix-serve.log" 2>&1 &
  local sup=$!
  local load_start
  load_start=$(date +%s)
  python3 - "$port" <<'PY'
import sys, time, urllib.request
port = sys.argv[1]
for _ in range(600):
    try:
        if urllib.request.urlopen(f"http://127.0.0.1:{port}/ready", timeout=2).status == 200:
            sys.exit(0)
    except Exception:
        pass
    time.sleep(1)
sys.exit(1)
PY
  local ready=$?
  echo "[${name:-default}] serving after $(($(date +%s) - load_start)) s (ready rc=$ready)"
  if [[ $ready == 0 ]]; then
    timeout "${COMPARE_TIMEOUT_S:-600}" python3 scripts/gpu/e2e_compare.py \
      --url "http://127.0.0.1:$port" --reference "$work/reference.json" \
      --out "$OUT/e2e-$arch$suffix.json"
    echo "[${name:-default}] compare rc=$?"
  fi
  kill -TERM $sup
  wait $sup
  echo "[${name:-default}] supervisor exit $?"
  grep -E "error|ERROR|critical" "$OUT/e2e-$arch$suffix-serve.log" | head -5
}

if [[ -n ${VARIANTS:-} ]]; then
  IFS='|' read -r -a variants <<<"$VARIANTS"
  for v in "${variants[@]}"; do
    name=${v%%=*} rest=${v#*=}
    worker_args=""
    [[ $rest == *";"* ]] && worker_args=${rest#*;}
    serve_and_compare "$name" "${rest%%;*}" "$worker_args"
  done
else
  serve_and_compare "" "${SUPERVISOR_ARGS:-}" "${WORKER_ARGS:-}"
fi
rm -rf "$work"
