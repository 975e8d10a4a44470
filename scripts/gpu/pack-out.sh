#!/usr/bin/env bash
# On the GPU host, last in a device command that ran several scripts: the device tool returns at
# most 8 files from $OUT, so when there are more, every file but the small text summaries
# (*.txt under 64 KB) goes into $OUT/out.tar.gz (JSON results and logs included), and nothing
# is left out silently. Usage: ...; bash scripts/gpu/pack-out.sh
set -euo pipefail
OUT=${OUT:?OUT is the device tool\'s output folder}
cd "$OUT"
mapfile -t files < <(find . -maxdepth 1 -type f ! -name out.tar.gz -printf '%f\n' | sort)
((${#files[@]} > 8)) || exit 0
pack=()
for f in "${files[@]}"; do
  [[ $f == *.txt && $(stat -c %s "$f") -lt 65536 ]] && continue
  pack+=("$f")
done
# Too many summaries to keep beside the tarball: pack them too.
((${#files[@]} - ${#pack[@]} <= 7)) || pack=("${files[@]}")
tar -czf out.tar.gz "${pack[@]}"
rm -f -- "${pack[@]}"
echo "pack-out: ${#pack[@]} files in out.tar.gz; kept: $(find . -maxdepth 1 -type f ! -name out.tar.gz | wc -l)"
