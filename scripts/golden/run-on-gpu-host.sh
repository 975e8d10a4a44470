#!/usr/bin/env bash
# Runs every golden generator on the GPU host (which has torch, transformers and tokenizers)
# and writes the fixtures under $OUT/golden/, mirroring tests/data/. Copy them into tests/data/
# and commit them with the commit hash and the date of the run (see tests/data/*/README.md).
# Needs the tokenizers: carry them with BUNDLE_ASSETS=1 scripts/gpu/bundle.sh.
set -euo pipefail
source "$(dirname "$0")/../gpu/env.sh"
cd "$XSERV_ROOT"
python3 -c 'import tokenizers, transformers; print("tokenizers", tokenizers.__version__, "transformers", transformers.__version__)' | tee "$OUT/golden-versions.txt"
python3 scripts/golden/tokenizer_goldens.py --assets .assets/tokenizers --out "$OUT/golden/tokenizer"
python3 scripts/golden/chat_template_goldens.py --assets .assets/tokenizers \
  --templates tests/data/chat_templates --out "$OUT/golden/chat_template"
