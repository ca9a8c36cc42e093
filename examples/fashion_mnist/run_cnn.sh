#!/usr/bin/env bash
# The Fashion-MNIST CNN (fashion_cnn.onnx, trained with PyTorch by train_cnn.py: conv-relu-maxpool x 2,
# x.view(x.size(0), -1), Linear) in int8 and bf16 with `tpuw run`: the 1000 committed test images on
# ref, then the first ROWS of them in int8 on the verilated device (rtl), accuracy next to the float model,
# images/s and cycles per image. Needs no PyTorch and no dataset (the files are committed).
#
#   examples/fashion_mnist/run_cnn.sh [BUILD_DIR]      default BUILD_DIR: build
#
# Environment: ROWS (rtl images, default 200; 0 skips rtl), OUT (default BUILD_DIR/fashion_mnist).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-build}
tpuw=$build/host/tools/tpuw/tpuw
rows=${ROWS:-200}
out=${OUT:-$build/fashion_mnist}
[ -x "$tpuw" ] || { echo "run_cnn.sh: $tpuw not found (build first)" >&2; exit 1; }
mkdir -p "$out"
x=$here/fashion_test_x.npy
y=$here/fashion_test_y.npy

echo "== int8 on ref, 1000 test images (activation scales calibrated on them)"
"$tpuw" run "$here/fashion_cnn.onnx" --input "$x" --labels "$y" --backend ref --check -q
echo "== bf16 on ref, 1000 test images (no calibration)"
"$tpuw" run "$here/fashion_cnn.onnx" --input "$x" --labels "$y" --backend ref --precision bf16 --check -q
if [ "$rows" -gt 0 ] && "$tpuw" info --backend rtl > /dev/null 2>&1; then
  echo "== int8 on rtl, the first $rows images (same calibration)"
  python3=/usr/bin/python3
  "$python3" -c "import numpy as np, sys; np.save(sys.argv[3], np.load(sys.argv[1])[:int(sys.argv[5])]); \
np.save(sys.argv[4], np.load(sys.argv[2])[:int(sys.argv[5])])" "$x" "$y" "$out/cnn_x.npy" "$out/cnn_y.npy" "$rows"
  "$tpuw" run "$here/fashion_cnn.onnx" --input "$out/cnn_x.npy" --labels "$out/cnn_y.npy" --calibrate "$x" \
    --backend rtl --check -q
fi
