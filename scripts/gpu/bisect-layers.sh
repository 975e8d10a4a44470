#!/usr/bin/env bash
# On the GPU host: per-layer relative error of our CUDA (and CPU) forward vs transformers fp32,
# next to transformers' own bf16 error (scripts/gpu/bisect_layers.py). Results in $OUT.
# Usage: bisect-layers.sh ARCH [LAYERS] [LEN] [BACKENDS]
set -uo pipefail
source "$(dirname "$0")/env.sh"
cd "$XSERV_ROOT"
arch=${1:-llama3-8b}
work=$(mktemp -d)
python3 scripts/gpu/bisect_layers.py --arch "$arch" --layers "${2:-8}" --len "${3:-256}" \
  --backends "${4:-cuda,cpu}" --score .bundle/bin/xserv-score --out "$work" 2>&1 |
  grep -v Warning | tee "$OUT/bisect-$arch.txt"
cp "$work/bisect.json" "$OUT/bisect-$arch.json" 2>/dev/null
rm -rf "$work"
