#!/usr/bin/python3
"""Train the Fashion-MNIST CNN of train_cnn.py on the device (`tpuw train`, bf16) and with PyTorch
from the same initialization, on the same rows in the same order, and compare (issue 13).

    ./train_cnn_device.py [--tpuw build/host/tools/tpuw/tpuw] [--backend ref] [--rows 9600]
                          [--epochs 1] [--batch 32] [--lr 0.05] [--momentum 0.9] [--weight-decay 0]
                          [--src /usr/share/datasets/fashion-mnist] [--json OUT.json]
                          [--save-untrained reference/fashion_cnn_untrained.onnx]

Both train --epochs passes over the first --rows training images (pixel / 255, float32), file order,
torch.optim.SGD semantics, mean cross-entropy; the model is FashionCnn (Conv 1->8 3x3 pad 1, ReLU,
MaxPool 2, Conv 8->16 4x4, ReLU, MaxPool 2 ceil_mode, Linear 576->10), torch seed 0. Then both are
evaluated on the first 1000 test images: PyTorch in float, the device-trained model by `tpuw run
--precision bf16` on the same backend. Needs Debian's python3-torch and dataset-fashion-mnist.
--save-untrained also keeps the untrained ONNX file (PyTorch's initialization, seed 0): run_cnn.sh
trains that committed file on the device without needing PyTorch.
"""
import argparse
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
from torch import nn

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from convert import read_idx  # noqa: E402
from train_cnn import FashionCnn  # noqa: E402

TEST_ROWS = 1000


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tpuw", default=str(HERE.parent.parent / "build" / "host" / "tools" / "tpuw" / "tpuw"))
    ap.add_argument("--backend", default="ref")
    ap.add_argument("--src", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--rows", type=int, default=9600)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--weight-decay", type=float, default=0.0)
    ap.add_argument("--json", default="")
    ap.add_argument("--save-untrained", default="", help="also write the untrained ONNX model here")
    a = ap.parse_args()
    src = pathlib.Path(a.src)
    xtr = (read_idx(src / "train-images-idx3-ubyte.gz")[:a.rows].reshape(-1, 1, 28, 28) / np.float32(255)).astype(np.float32)
    ytr = read_idx(src / "train-labels-idx1-ubyte.gz")[:a.rows].astype(np.int64)
    xte = (read_idx(src / "t10k-images-idx3-ubyte.gz")[:TEST_ROWS].reshape(-1, 1, 28, 28) / np.float32(255)).astype(np.float32)
    yte = read_idx(src / "t10k-labels-idx1-ubyte.gz")[:TEST_ROWS].astype(np.int64)

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = FashionCnn()
    with tempfile.TemporaryDirectory(prefix="tpuw_fashion_cnn_") as tmp:
        t = pathlib.Path(tmp)
        torch.onnx.export(model, torch.zeros(1, 1, 28, 28), str(t / "untrained.onnx"), input_names=["image"],
                          output_names=["logits"], dynamic_axes={"image": {0: "batch"}, "logits": {0: "batch"}},
                          opset_version=13)
        if a.save_untrained:
            shutil.copyfile(t / "untrained.onnx", a.save_untrained)
        for name, arr in (("x", xtr), ("y", ytr), ("tx", xte), ("ty", yte)):
            np.save(t / f"{name}.npy", arr)

        # PyTorch, float32.
        opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=a.momentum, weight_decay=a.weight_decay)
        loss_fn = nn.CrossEntropyLoss()
        xt, yt = torch.tensor(xtr), torch.tensor(ytr)
        t0 = time.time()
        torch_epochs = []
        for _ in range(a.epochs):
            total = 0.0
            for i in range(0, a.rows, a.batch):
                opt.zero_grad()
                loss = loss_fn(model(xt[i:i + a.batch]), yt[i:i + a.batch])
                loss.backward()
                opt.step()
                total += loss.item() * len(yt[i:i + a.batch])
            torch_epochs.append(total / a.rows)
        torch_s = time.time() - t0
        with torch.no_grad():
            torch_acc = float((model(torch.tensor(xte)).argmax(1).numpy() == yte).mean())
        torch_loss = torch_epochs[-1]

        # The device.
        out = t / "trained.onnx"
        t0 = time.time()
        r = subprocess.run([a.tpuw, "train", str(t / "untrained.onnx"), "--input", str(t / "x.npy"), "--labels",
                            str(t / "y.npy"), "--output", str(out), "--backend", a.backend, "--batch", str(a.batch),
                            "--lr", str(a.lr), "--momentum", str(a.momentum), "--weight-decay", str(a.weight_decay),
                            "--epochs", str(a.epochs), "--json", "-q"], capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"tpuw train failed ({r.returncode}): {r.stderr}")
        dev_s = time.time() - t0
        j = json.loads(r.stdout)
        r = subprocess.run([a.tpuw, "run", str(out), "--input", str(t / "tx.npy"), "--labels", str(t / "ty.npy"),
                            "--precision", "bf16", "--backend", a.backend, "--json", "-q"], capture_output=True,
                           text=True)
        if r.returncode != 0:
            sys.exit(f"tpuw run failed ({r.returncode}): {r.stderr}")
        run = json.loads(r.stdout)
    res = {
        "rows": a.rows, "epochs": a.epochs, "batch": a.batch, "steps": j["steps"], "lr": a.lr, "momentum": a.momentum,
        "weight_decay": a.weight_decay, "backend": a.backend,
        "torch": {"loss": torch_loss, "epoch_losses": torch_epochs, "test_accuracy": torch_acc, "seconds": torch_s},
        "device": {"loss": j["epochs"][-1]["loss"], "epoch_losses": [e["loss"] for e in j["epochs"]], "test_accuracy": run["accuracy"]["bf16"], "seconds": dev_s,
                   "cycles_per_step": j["cycles_per_step"], "utilization": j["utilization"]},
    }
    print(f"Fashion-MNIST CNN, {a.epochs} epoch(s) of {a.rows} rows, {j['steps']} steps of {a.batch} (lr {a.lr}, momentum {a.momentum}): "
          f"PyTorch loss {torch_loss:.4f}, test accuracy {100 * torch_acc:.2f}%; "
          f"device ({a.backend}, bf16) loss {res['device']['loss']:.4f}, test accuracy "
          f"{100 * res['device']['test_accuracy']:.2f}% ({TEST_ROWS} test images); "
          f"{j['cycles_per_step']:.0f} cycles per step, utilization {j['utilization']:.3f}, {dev_s:.1f} s")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=2)
            f.write("\n")


if __name__ == "__main__":
    main()
