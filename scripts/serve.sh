#!/usr/bin/env bash
# The README's serve command. Target behaviour (issue 7): with no arguments, build, generate the
# demo model and serve it on the CPU backend at http://127.0.0.1:8080; with --model DIR on a GPU
# machine, serve that model on CUDA (--tp/--pp passed through).
#
# It builds and starts what exists today and says plainly what does not.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
scripts/build.sh

missing=()
for bin in xserv-supervisor xserv-router xserv-worker; do
  [[ -x build/bin/$bin ]] || missing+=("$bin")
done
if ((${#missing[@]} > 0)); then
  echo
  echo "serve: not available yet: ${missing[*]}."
  echo "serve: the serving stack (worker, router, supervisor) is still being built;"
  echo "serve: see README.md, section Status, for what exists today."
  exit 3
fi
exec build/bin/xserv-supervisor "$@"
