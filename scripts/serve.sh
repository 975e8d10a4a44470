#!/usr/bin/env bash
# The README's serve command.
#   scripts/serve.sh                      demo: a tiny random Qwen3 (real Qwen3 tokenizer) on the
#                                         CPU backend at http://127.0.0.1:8080
#   scripts/serve.sh --model DIR [...]    a HF model directory; CUDA when a GPU is visible and the
#                                         CUDA backend is built, else CPU
# Any other flags go to xserv-supervisor (e.g. --replicas 2, --http-port 9000, --api-key is a
# router flag: --router-arg=--api-key --router-arg=KEY). Environment: PORT (default 8080).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
scripts/fetch-assets.sh
scripts/build.sh >/dev/null

model=""
args=()
while (($#)); do
  case $1 in
    --model) model=$2; shift 2 ;;
    --model=*) model=${1#--model=}; shift ;;
    *) args+=("$1"); shift ;;
  esac
done

backend=cpu
if [[ -z $model ]]; then
  model=.assets/demo/qwen3-tiny
  if [[ ! -f $model/model.safetensors ]]; then
    echo "serve: generating the demo model (random weights, real Qwen3 tokenizer) in $model"
    build/bin/xserv-make-model --arch qwen3 --preset tiny --seed 1 \
      --tokenizer .assets/tokenizers/qwen3 --out "$model" --log-level warn
  fi
  echo "serve: the demo model has random weights: its text is gibberish, the API is real"
elif command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 &&
     build/bin/xserv-worker --version 2>/dev/null | grep -q "cuda on"; then
  backend=cuda
fi

port=${PORT:-8080}
cat <<MSG
serve: $model on the $backend backend at http://127.0.0.1:$port (Ctrl-C drains and stops)
  curl http://127.0.0.1:$port/v1/chat/completions -H 'Content-Type: application/json' \\
    -d '{"messages": [{"role": "user", "content": "Hello!"}], "max_tokens": 32}'
MSG
exec build/bin/xserv-supervisor --model "$model" --backend "$backend" --http-port "$port" \
  "${args[@]}"
