#!/usr/bin/env bash
# The README's first command: set up, build, and multiply two int8 matrices on the verilated TPU,
# checked bit for bit against the reference model and a plain CPU product.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh build
echo
echo "== tpuw info (registers of the simulated device)"
build/host/tools/tpuw/tpuw info --backend rtl
echo
echo "== tpuw gemm: examples/gemm/a.npy (int8 100x70) x b.npy (int8 70x50) on the rtl backend, --check"
build/host/tools/tpuw/tpuw gemm --a examples/gemm/a.npy --b examples/gemm/b.npy --out build/c.npy \
  --backend rtl --check
echo
echo "== tpuw gemm: random 256x256x256 on the rtl backend, --check"
build/host/tools/tpuw/tpuw gemm --m 256 --k 256 --n 256 --seed 1 --backend rtl --check
