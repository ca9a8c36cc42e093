#!/usr/bin/env bash
# The Fashion-MNIST CNN (fashion_cnn.onnx, trained with PyTorch by train_cnn.py: conv-relu-maxpool x 2,
# x.view(x.size(0), -1), Linear) in int8 and bf16 with `tpuw run`: the 1000 committed test images on
# ref, then the first ROWS of them in int8 on the verilated device (rtl), accuracy next to the float model,
# images/s and cycles per image. Needs no PyTorch and no dataset (the files are committed).
# Then, when Debian's dataset-fashion-mnist is installed, the same CNN is trained ON THE DEVICE from
# PyTorch's initialization (reference/fashion_cnn_untrained.onnx, seed 0; bf16 on ref, TRAIN_ROWS
# images, batch 32, lr 0.05, momentum 0.9, file order), printed next to PyTorch's stored result for
# the same start, rows and order (reference/cnn_device_training.json, train_cnn_device.py), and the
# device-trained file runs in int8 on rtl (first ROWS test images) and in bf16 on ref.
#
#   examples/fashion_mnist/run_cnn.sh [BUILD_DIR]      default BUILD_DIR: build
#
# Environment: ROWS (rtl images, default 200; 0 skips rtl), OUT (default BUILD_DIR/fashion_mnist),
# TRAIN_ROWS (training images, default 9600 = 300 steps, the stored PyTorch figure's; 0 skips training),
# SRC (dataset directory, default /usr/share/datasets/fashion-mnist).
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

train_rows=${TRAIN_ROWS:-9600}
src=${SRC:-/usr/share/datasets/fashion-mnist}
if [ "$train_rows" -gt 0 ] && [ -f "$src/train-images-idx3-ubyte.gz" ]; then
  steps=$(( (train_rows + 31) / 32 ))
  echo "== training the CNN on the device: bf16 on ref, $train_rows images ($steps steps of 32, lr 0.05, momentum 0.9) from PyTorch's initialization"
  data=$out/cnn_train
  "$here/convert.py" "$data" --src "$src" --image --train-rows "$train_rows" --test-rows 1000 > /dev/null
  "$tpuw" train "$here/reference/fashion_cnn_untrained.onnx" --input "$data/train_x.npy" --labels "$data/train_y.npy" \
    --output "$out/cnn_trained.onnx" --backend ref --batch 32 --lr 0.05 --momentum 0.9 --epochs 1
  if [ "$train_rows" -eq 9600 ]; then
    /usr/bin/python3 -c "import json, sys; t = json.load(open(sys.argv[1]))['torch']; \
print(f\"PyTorch fp32 from the same initialization, rows and order: loss {t['loss']:.4f}, test accuracy {100 * t['test_accuracy']:.2f}% \
(first 1000 test images; reference/cnn_device_training.json)\")" "$here/reference/cnn_device_training.json"
  fi
  echo "== the device-trained CNN in bf16 on ref, 1000 test images"
  "$tpuw" run "$out/cnn_trained.onnx" --input "$data/test_x.npy" --labels "$data/test_y.npy" --backend ref \
    --precision bf16 --check -q
  if [ "$rows" -gt 0 ] && "$tpuw" info --backend rtl > /dev/null 2>&1; then
    echo "== the device-trained CNN in int8 on rtl, the first $rows test images (calibrated on the 1000)"
    /usr/bin/python3 -c "import numpy as np, sys; np.save(sys.argv[3], np.load(sys.argv[1])[:int(sys.argv[5])]); \
np.save(sys.argv[4], np.load(sys.argv[2])[:int(sys.argv[5])])" "$data/test_x.npy" "$data/test_y.npy" \
      "$data/rtl_x.npy" "$data/rtl_y.npy" "$rows"
    "$tpuw" run "$out/cnn_trained.onnx" --input "$data/rtl_x.npy" --labels "$data/rtl_y.npy" \
      --calibrate "$data/test_x.npy" --backend rtl --check -q
  fi
fi
