#!/usr/bin/env bash
# Fashion-MNIST MLP 784-256-10 trained with `tpuw train` on the device (ref backend) and in fp32 on
# the host, test accuracy next to PyTorch's stored figure for the same run (reference/
# fashion_reference.json). README.md explains the figures.
#
#   examples/fashion_mnist/run.sh [BUILD_DIR]        default BUILD_DIR: build
#
# Environment: LIMIT training rows (default 10000; 0 = all 60000), EPOCHS (5), BACKEND (ref),
# RTL_STEPS (3: that many steps on rtl and on ref must give the same bytes; 0 skips the check),
# DATA (the .npy and model directory, default BUILD_DIR/fashion_mnist).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-build}
tpuw=$build/host/tools/tpuw/tpuw
data=${DATA:-$build/fashion_mnist}
limit=${LIMIT:-10000}
epochs=${EPOCHS:-5}
backend=${BACKEND:-ref}
rtl_steps=${RTL_STEPS:-3}
[ -x "$tpuw" ] || { echo "run.sh: $tpuw not found (build first: scripts/setup.sh)" >&2; exit 1; }

mkdir -p "$data"
[ -f "$data/test_y.npy" ] || "$here/convert.py" "$data"
[ -f "$data/fashion_mlp.onnx" ] || "$here/make_mlp.py" "$data/fashion_mlp.onnx" --sizes 784,256,10 --seed 0

train() {  # train BACKEND OUTPUT EXTRA...
  local b=$1 out=$2
  shift 2
  "$tpuw" train "$data/fashion_mlp.onnx" --input "$data/train_x.npy" --labels "$data/train_y.npy" \
    --limit "$limit" --epochs "$epochs" --batch 64 --lr 0.05 --momentum 0.9 --backend "$b" \
    --output "$out" "$@"
}

device=1
echo "== $backend (the device), $epochs epochs of ${limit/#0/all} rows, batch 64, lr 0.05, momentum 0.9"
train "$backend" "$data/trained_$backend.onnx" --validate "$data/test_x.npy" --validate-labels "$data/test_y.npy" --json \
  > "$data/$backend.json"
echo "== host fp32"
train host "$data/trained_host.onnx" --validate "$data/test_x.npy" --validate-labels "$data/test_y.npy" --json > "$data/host.json"

if [ "$device" = 1 ] && [ "$rtl_steps" -gt 0 ] && "$tpuw" info --backend rtl > /dev/null 2>&1; then
  echo "== $rtl_steps steps on rtl and on ref: the same weights, bit for bit"
  train rtl "$data/trained_rtl_steps.onnx" --max-steps "$rtl_steps" -q > /dev/null
  train ref "$data/trained_ref_steps.onnx" --max-steps "$rtl_steps" -q > /dev/null
  if cmp -s "$data/trained_rtl_steps.onnx" "$data/trained_ref_steps.onnx"; then
    echo "   rtl == ref after $rtl_steps steps"
  else
    echo "   rtl and ref differ after $rtl_steps steps" >&2
    exit 3
  fi
fi

/usr/bin/python3 - "$data" "$backend" "$device" "$limit" "$epochs" "$here/reference/fashion_reference.json" <<'PY'
import json, sys
data, backend, device, limit, epochs, ref_path = sys.argv[1:]
runs = []
if device == "1":
    runs.append((f"{backend} (bf16 device)", json.load(open(f"{data}/{backend}.json"))))
runs.append(("host fp32", json.load(open(f"{data}/host.json"))))
refs = json.load(open(ref_path))["runs"]
torch = next((r for r in refs if r["rows"] == (int(limit) or 60000) and r["epochs"] == int(epochs)), None)
print(f"{'epoch':>5}  " + "  ".join(f"{name:>22}" for name, _ in runs) + ("  " + f"{'PyTorch fp32 (stored)':>22}" if torch else ""))
for e in range(int(epochs)):
    cells = [f"{100 * r['epochs'][e]['accuracy']:6.2f}% loss {r['epochs'][e]['loss']:.4f}" for _, r in runs]
    if torch:
        t = torch["per_epoch"][e]
        cells.append(f"{100 * t['accuracy']:6.2f}% loss {t['loss']:.4f}")
    print(f"{e + 1:>5}  " + "  ".join(f"{c:>22}" for c in cells))
for name, r in runs:
    per_epoch = sum(e["seconds"] for e in r["epochs"]) / len(r["epochs"])
    line = f"{name}: {per_epoch:.1f} s per epoch, {r['steps_per_s']:.1f} steps/s"
    if r["cycles_per_step"]:
        line += f", {r['cycles_per_step']:.0f} cycles per step, MXU utilization {r['utilization']:.3f}"
    print(line)
if not torch:
    print(f"(no stored PyTorch figure for {limit} rows x {epochs} epochs; see torch_reference.py)")
PY
