#!/usr/bin/env bash
# A/B of engine-bench binaries on one random model. Usage: ab.sh ARCH BATCHES "bin1 bin2" [prompt lens]
set -uo pipefail
source scripts/gpu/env.sh
arch=$1; batches=$2; bins=$3; lens=${4:-128}
tok=$(tokenizer_of "$arch")
work=$(mktemp -d)
python3 scripts/gpu/e2e_reference.py --arch "$arch" --tokenizer ".assets/tokenizers/$tok" --out "$work" --model-only ${REF_FLAGS:-} >/dev/null 2>&1
for len in $lens; do
for rep in 1 2; do
for b in $bins; do
  echo "== $b prompt $len rep $rep"
  .bundle/bin/$b --model "$work/model" --backend cuda --prompt-len $len --gen-len ${GEN_LEN:-64} --batch "$batches" --repeats 3 --batch-invariant false ${BENCH_FLAGS:-} 2>&1 | grep -E "^ *[0-9]+ +[0-9]+ " 
done; done; done
rm -rf "$work"
