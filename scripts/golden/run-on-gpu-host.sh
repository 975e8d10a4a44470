#!/usr/bin/env bash
# Runs every golden generator on the GPU host (which has torch, transformers and tokenizers)
# and packs the fixtures into $OUT/golden.tar.gz (golden/<kind>/<name>.jsonl, mirroring
# tests/data/). Unpack them into tests/data/ and commit them with the command, commit and date.
# Needs the tokenizers: carry them with BUNDLE_ASSETS=1 scripts/gpu/bundle.sh.
set -euo pipefail
source "$(dirname "$0")/../gpu/env.sh"
cd "$XSERV_ROOT"
work=$(mktemp -d)
python3 -c 'import tokenizers, transformers; print("tokenizers", tokenizers.__version__, "transformers", transformers.__version__)' | tee "$OUT/golden-versions.txt"
python3 scripts/golden/tokenizer_goldens.py --assets .assets/tokenizers --out "$work/golden/tokenizer"
python3 scripts/golden/chat_template_goldens.py --assets .assets/tokenizers \
  --templates tests/data/chat_templates --out "$work/golden/chat_template"
echo "commit $XSERV_COMMIT date $(date -u +%Y-%m-%dT%H:%M:%SZ)" >>"$OUT/golden-versions.txt"
tar -C "$work" -czf "$OUT/golden.tar.gz" golden
