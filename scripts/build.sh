#!/usr/bin/env bash
# Configures and builds xserv into build/ (Release, Ninja, ccache when present).
# Usage: scripts/build.sh [extra cmake -D options...]
# Environment: BUILD_DIR (default build), XSERV_WITH_CUDA (AUTO|ON|OFF, default AUTO).
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR=${BUILD_DIR:-build}
# Compiler caches hit across clones in different folders (CI builds a fresh clone elsewhere).
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD}
JOBS=${JOBS:-$(nproc)}
cmake -S . -B "$BUILD_DIR" -G Ninja \
  -DCMAKE_BUILD_TYPE="${CMAKE_BUILD_TYPE:-Release}" \
  -DXSERV_WITH_CUDA="${XSERV_WITH_CUDA:-AUTO}" \
  "$@"
cmake --build "$BUILD_DIR" -j "$JOBS"
