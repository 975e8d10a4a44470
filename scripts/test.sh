#!/usr/bin/env bash
# The README's test command: installs dependencies, builds, and runs every CPU test with ctest.
# GPU tests are built when the CUDA toolkit exists and skip without a device.
# Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
scripts/fetch-assets.sh
start=$(date +%s)
scripts/build.sh
echo "test: build took $(($(date +%s) - start)) s"
cd "${BUILD_DIR:-build}"
ctest --output-on-failure -j "${JOBS:-$(nproc)}" --timeout 600
