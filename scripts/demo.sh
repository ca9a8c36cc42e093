#!/usr/bin/env bash
# The README's first command: set up, build, then on the verilated TPU
#   1. multiply two int8 matrices, checked bit for bit against the reference model and the CPU;
#   2. classify the held-out handwritten digits with an int8-quantized MLP (ONNX), printing the
#      device's accuracy next to the float model's;
#   3. run a PyTorch CNN on Fashion-MNIST in int8 and bf16, train the same CNN on the device from
#      PyTorch's initialization and run the result in int8 on rtl;
#   4. train an MLP on Fashion-MNIST on the device (bf16, ref backend), test accuracy per epoch next
#      to fp32 on the host and PyTorch's stored figure, and 3 steps rtl == ref bit for bit.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh build
tpuw=build/host/tools/tpuw/tpuw
echo
echo "== tpuw info (configuration read from the simulated device's registers)"
"$tpuw" info --backend rtl
echo
echo "== tpuw gemm: examples/gemm/a.npy (int8 100x70) x b.npy (int8 70x50) on the rtl backend, --check"
"$tpuw" gemm --a examples/gemm/a.npy --b examples/gemm/b.npy --out build/c.npy --backend rtl --check
echo
echo "== tpuw gemm: random 256x256x256 on the rtl backend, --check"
"$tpuw" gemm --m 256 --k 256 --n 256 --seed 1 --backend rtl --check
echo
echo "== tpuw run: digits classifier (64-32-10 MLP, int8) on the rtl backend, 359 held-out images"
"$tpuw" run examples/digits/digits_mlp.onnx --input examples/digits/test_x.npy \
  --labels examples/digits/test_y.npy --calibrate examples/digits/calib_x.npy \
  --output build/digits_probs.npy --backend rtl
echo
echo "== a CNN from PyTorch (Fashion-MNIST, conv-relu-maxpool x 2 + linear): int8 and bf16 inference; then trained on the device (bf16, ref, 300 steps) and run in int8 on rtl"
ROWS=100 examples/fashion_mnist/run_cnn.sh build
echo
echo "== tpuw train: Fashion-MNIST MLP 784-256-10 on the device (bf16, ref backend), 60,000 images, 5 epochs"
LIMIT=0 examples/fashion_mnist/run.sh build
