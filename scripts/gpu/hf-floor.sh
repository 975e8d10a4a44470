#!/usr/bin/env bash
# On the GPU host: our engine bench and transformers on the same random weights in one run, the
# side-by-side floor of issue 9. Writes $OUT/hf-floor-ARCH.txt (both JSON lines).
# Usage: hf-floor.sh [qwen3-8b|llama3-8b|gpt2] [batches, default 1,64]
# HF_COMPILE=1 also times torch.compile(mode="reduce-overhead") with a static cache.
set -uo pipefail
source "$(dirname "$0")/env.sh"
cd "$XSERV_ROOT"
arch=${1:-qwen3-8b}
batches=${2:-1,64}
tok=$(tokenizer_of "$arch") || exit 2
work=$(mktemp -d)
export PYTHONUNBUFFERED=1
python3 scripts/gpu/e2e_reference.py --arch "$arch" --tokenizer ".assets/tokenizers/$tok" \
  --out "$work" --model-only >/dev/null 2>&1
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ) commit: $XSERV_COMMIT"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  .bundle/bin/xserv-engine-bench --model "$work/model" --backend cuda --prompt-len 128 \
    --gen-len 64 --batch "$batches" --repeats 3 2>&1 | grep -v "^\s*$"
  compile=()
  [[ ${HF_COMPILE:-0} == 1 ]] && compile=(--compile)
  python3 scripts/gpu/hf_floor.py --model "$work/model" --prompt-len 128 --gen-len 64 \
    --batch "$batches" "${compile[@]}" 2>&1 | grep -v Warning | tail -3
} | tee "$OUT/hf-floor-$arch.txt"
rm -rf "$work"
