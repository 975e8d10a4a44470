#!/usr/bin/env bash
# On the GPU host: our tokenizer and HF `tokenizers` encoding the same text on the same CPU,
# single thread; prints both and writes $OUT/tokenizer-bench.txt.
set -uo pipefail
source "$(dirname "$0")/env.sh"
cd "$XSERV_ROOT"
{
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
  python3 scripts/bench/hf_tokenizer_throughput.py --assets .assets
  for t in qwen3 gpt-oss llama3 gpt2; do
    echo "== xserv $t"
    .bundle/bin/xserv-tokenizer-bench --tokenizer .assets/tokenizers/$t \
      --text .assets/text/moby-dick.txt 2>&1 | grep -E "encode|decode"
  done
} 2>&1 | tee "$OUT/tokenizer-bench.txt"
