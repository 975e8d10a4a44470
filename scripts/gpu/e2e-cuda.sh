#!/usr/bin/env bash
# On the GPU host: random weights of a real architecture (transformers, bf16) served by the whole
# stack (supervisor -> router -> worker on CUDA), checked against transformers on the same weights
# (prompt logprobs, teacher-forced top-1, greedy prefix, a streaming chat). Results under $OUT.
# Usage: e2e-cuda.sh [qwen3-8b|llama3-8b|gpt2|gpt-oss-20b] [prompts] [len]
# LAYERS=N builds only the first N layers (gpt-oss-20b only: e2e_reference.py --layers).
# FP8=1 writes the model in the HF FP8 layout (qwen3-8b, llama3-8b: e2e_reference.py --fp8).
# WORKER_ARGS adds worker flags, e.g. "--flash-prefill true" or "--tp-cuda-graphs true".
# BATCH_INVARIANT=true serves with xserv-worker --batch-invariant (the determinism check's mode).
# SUPERVISOR_ARGS adds supervisor flags, e.g. "--tp 2 --devices 0,1" on a two-GPU host.
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
  $([[ ${FP8:-0} == 1 ]] && echo --fp8) 2>&1 \
  | tee "$OUT/e2e-$arch-reference.log" | tail -3
nvidia-smi --query-gpu=index,name,memory.used --format=csv,noheader
echo "reference: $(($(date +%s) - start)) s"
port=18080
# shellcheck disable=SC2086
.bundle/bin/xserv-supervisor --model "$work/model" --backend cuda --http-port $port ${SUPERVISOR_ARGS:-} \
  --bin-dir "$XSERV_ROOT/.bundle/bin" --worker-base-port 18100 \
  --worker-arg=--max-model-len --worker-arg=4096 \
  --worker-arg=--batch-invariant --worker-arg="${BATCH_INVARIANT:-false}" \
  ${WORKER_ARGS:+$(for a in $WORKER_ARGS; do printf -- '--worker-arg=%s ' "$a"; done)} >"$OUT/e2e-$arch-serve.log" 2>&1 &
sup=$!
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
ready=$?
echo "serving after $(($(date +%s) - load_start)) s (ready rc=$ready)"
if [[ $ready == 0 ]]; then
  python3 scripts/gpu/e2e_compare.py --url "http://127.0.0.1:$port" \
    --reference "$work/reference.json" --out "$OUT/e2e-$arch.json"
fi
kill -TERM $sup
wait $sup
echo "supervisor exit $?"
grep -E "error|ERROR|critical" "$OUT/e2e-$arch-serve.log" | head -5
rm -rf "$work"
