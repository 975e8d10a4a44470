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
(cd "${BUILD_DIR:-build}" && ctest --output-on-failure -j "${JOBS:-$(nproc)}" --timeout 600)
# The docker compose deployment (deploy/): the CPU image built and served, chat checked, a worker
# killed and recovered. Exit 77: no Docker engine can run on this machine. XSERV_SKIP_COMPOSE=1
# leaves it out (quick local runs).
if [[ ${XSERV_SKIP_COMPOSE:-0} != 1 ]]; then
  start=$(date +%s)
  rc=0
  scripts/compose-smoke.sh || rc=$?
  echo "test: compose smoke took $(($(date +%s) - start)) s (rc=$rc)"
  if ((rc == 77)); then
    echo "test: compose smoke skipped (no Docker engine here)"
  elif ((rc != 0)); then
    exit "$rc"
  fi
fi
