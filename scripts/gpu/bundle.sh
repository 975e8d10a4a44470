#!/usr/bin/env bash
# Collects built executables plus the shared libraries they load into .bundle/ (git-ignored),
# small enough to carry to the GPU host (see docs/gpu-host.md).
#
# Bundled: every library resolved from /lib or /usr/lib except glibc's own, libstdc++ and
# libgcc_s (the host has newer ones). Not bundled: CUDA libraries (cudart, cuBLAS, cuBLASLt,
# NCCL), which the host provides itself.
#
# Usage: scripts/gpu/bundle.sh [BINARY_NAME...]   (default: every file in build/bin)
# With BUNDLE_ASSETS=1 the fetched tokenizers and text (.assets/, see scripts/fetch-assets.sh)
# travel too, as .bundle/assets.tar.xz; scripts/gpu/env.sh unpacks them on the host.
set -euo pipefail
cd "$(dirname "$0")/../.."

BUILD_DIR=${BUILD_DIR:-build}
OUT_DIR=${BUNDLE_DIR:-.bundle}
LIMIT_MIB=${BUNDLE_LIMIT_MIB:-50}  # the work tree travels too, under the 64 MiB carry limit

bins=("$@")
if ((${#bins[@]} == 0)); then
  mapfile -t bins < <(find "$BUILD_DIR/bin" -maxdepth 1 -type f -executable -printf '%f\n' | sort)
fi
((${#bins[@]} > 0)) || { echo "bundle: nothing in $BUILD_DIR/bin; build first" >&2; exit 1; }

rm -rf "$OUT_DIR"
mkdir -p "$OUT_DIR/bin" "$OUT_DIR/lib"

skip_re='^(libc|libm|libdl|libpthread|librt|ld-linux-x86-64|libstdc\+\+|libgcc_s|libcudart|libcublas|libcublasLt|libnccl|libcuda)\.so'
declare -A seen=()
for name in "${bins[@]}"; do
  src="$BUILD_DIR/bin/$name"
  [[ -x $src ]] || { echo "bundle: $src missing" >&2; exit 1; }
  strip --strip-unneeded -o "$OUT_DIR/bin/$name" "$src"
  while read -r lib path; do
    [[ -n $path && -f $path ]] || continue
    [[ $lib =~ $skip_re ]] && continue
    [[ $path == /usr/local/cuda* ]] && continue
    [[ -n ${seen[$lib]:-} ]] && continue
    seen[$lib]=1
    strip --strip-unneeded -o "$OUT_DIR/lib/$lib" "$(readlink -f "$path")"
  done < <(ldd "$src" | awk '$2 == "=>" { print $1, $3 }')
done

commit=$(git rev-parse HEAD 2>/dev/null || echo unknown)
[[ -z $(git status --porcelain --untracked-files=no 2>/dev/null) ]] || commit="$commit-dirty"
echo "$commit" >"$OUT_DIR/COMMIT"

if [[ ${BUNDLE_ASSETS:-0} == 1 ]]; then
  tar -C "${XSERV_ASSETS:-.assets}" -cJf "$OUT_DIR/assets.tar.xz" tokenizers text
fi

size_kib=$(du -sk "$OUT_DIR" | cut -f1)
echo "bundle: ${#bins[@]} executables, ${#seen[@]} libraries, $((size_kib / 1024)) MiB in $OUT_DIR"
if ((size_kib > LIMIT_MIB * 1024)); then
  # Too big to carry as is (OpenBLAS alone is 35 MiB): carry bin/ and lib/ xz-compressed;
  # scripts/gpu/env.sh unpacks them on the host.
  tar -C "$OUT_DIR" -cf - bin lib | xz -T"$(nproc)" -6 >"$OUT_DIR/payload.tar.xz"
  rm -rf "$OUT_DIR/bin" "$OUT_DIR/lib"
  size_kib=$(du -sk "$OUT_DIR" | cut -f1)
  echo "bundle: compressed to $((size_kib / 1024)) MiB"
fi
if ((size_kib > LIMIT_MIB * 1024)); then
  echo "bundle: over the ${LIMIT_MIB} MiB limit; pass fewer binaries" >&2
  exit 1
fi
