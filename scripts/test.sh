#!/usr/bin/env bash
# The README's second command: set up, build, and run the whole default test suite
# (unit, rtl, integration, lint, synth; the `slow` label is left out unless TPUW_SLOW=1).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh build
exclude=(-LE slow)
[ "${TPUW_SLOW:-0}" = 1 ] && exclude=()
cd build
ctest --output-on-failure -j "${TPUW_JOBS:-$(nproc)}" "${exclude[@]}"
