#!/usr/bin/env bash
# Runs golden generators on the GPU host (which has torch, transformers and tokenizers) and packs
# the fixtures into $OUT/golden.tar.gz (golden/<kind>/..., mirroring tests/data/). Unpack them
# into tests/data/ and commit them with the command, commit and date.
# Usage: run-on-gpu-host.sh [tokenizer] [chat_template] [models]   (default: all)
# tokenizer and chat_template need the tokenizers: BUNDLE_ASSETS=1 scripts/gpu/bundle.sh here.
set -euo pipefail
source "$(dirname "$0")/../gpu/env.sh"
cd "$XSERV_ROOT"
kinds=("$@")
((${#kinds[@]} > 0)) || kinds=(tokenizer chat_template models)
work=$(mktemp -d)
python3 -c 'import tokenizers, transformers, torch; print("tokenizers", tokenizers.__version__, "transformers", transformers.__version__, "torch", torch.__version__)' | tee "$OUT/golden-versions.txt"
for kind in "${kinds[@]}"; do
  case $kind in
    tokenizer) python3 scripts/golden/tokenizer_goldens.py --assets .assets/tokenizers \
                 --out "$work/golden/tokenizer" ;;
    chat_template) python3 scripts/golden/chat_template_goldens.py --assets .assets/tokenizers \
                 --templates tests/data/chat_templates --out "$work/golden/chat_template" ;;
    models) python3 scripts/golden/model_goldens.py --out "$work/golden/models" ;;
    *) echo "unknown golden kind $kind" >&2; exit 2 ;;
  esac
done
echo "commit $XSERV_COMMIT date $(date -u +%Y-%m-%dT%H:%M:%SZ)" >>"$OUT/golden-versions.txt"
tar -C "$work" -czf "$OUT/golden.tar.gz" golden
