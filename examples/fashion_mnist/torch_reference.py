#!/usr/bin/python3
"""PyTorch reference results for `tpuw train`, committed so the tests run without PyTorch.

Needs Debian's python3-torch, python3-onnx and python3-numpy (system Python, hence the shebang).

  ./torch_reference.py digits    (default) the test references, from examples/digits:
      reference/digits_mlp_untrained.onnx   Linear(64,32) -> ReLU -> Linear(32,10), torch seed 0,
                                            exported by torch.onnx.export (Gemm transB=1, W [out, in],
                                            initializers fc1.weight, fc1.bias, fc2.weight, fc2.bias),
                                            input "x" [batch, 64], output "logits" [batch, 10]
      reference/step1/*.npy, step3/*.npy   the parameters after 1 and 3 SGD steps (rows 0-31, 32-63,
                                            64-95; lr 0.1, momentum 0.9, weight decay 0.001)
      reference/digits_reference.json       5 epochs, batch 32, lr 0.05, momentum 0.9, weight decay
                                            1e-4, file order: per-epoch loss (sample-weighted mean
                                            of the batch losses) and test accuracy
  ./torch_reference.py fashion MODEL.onnx DATA_DIR [EPOCHS BATCH LR MOMENTUM LIMIT]
      trains MODEL.onnx's initial weights (make_mlp.py) on DATA_DIR/train_x.npy, train_y.npy in file
      order (the first LIMIT rows, 0 = all) and prints per-epoch loss and test accuracy as JSON
      (reference/fashion_reference.json holds the figure the example compares with).

Digits data: examples/digits/digits_x.npy (uint8 0..16) scaled by 1/16 to float32; rows 0..1439
train, rows 1440..1796 test, in file order.
"""
import collections
import json
import pathlib
import sys

import numpy as np
import onnx
import onnx.numpy_helper
import torch
from torch import nn

HERE = pathlib.Path(__file__).resolve().parent
REF = HERE / "reference"
DIGITS = HERE.parent / "digits"
N_TRAIN = 1440


def digits():
    x = np.load(DIGITS / "digits_x.npy").astype(np.float32) / np.float32(16.0)
    y = np.load(DIGITS / "digits_y.npy").astype(np.int64)
    return x[:N_TRAIN], y[:N_TRAIN], x[N_TRAIN:], y[N_TRAIN:]


def mlp(sizes):
    layers = []
    for i in range(len(sizes) - 1):
        layers.append((f"fc{i + 1}", nn.Linear(sizes[i], sizes[i + 1])))
        if i + 2 < len(sizes):
            layers.append((f"relu{i + 1}", nn.ReLU()))
    return nn.Sequential(collections.OrderedDict(layers))


def train(model, x, y, xt, yt, epochs, batch, lr, momentum, wd, log=None):
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum, weight_decay=wd)
    loss_fn = nn.CrossEntropyLoss()
    xs, ys = torch.tensor(x), torch.tensor(y)
    out = []
    for e in range(epochs):
        total, rows = 0.0, 0
        for i in range(0, len(xs), batch):
            opt.zero_grad()
            loss = loss_fn(model(xs[i:i + batch]), ys[i:i + batch])
            loss.backward()
            opt.step()
            total += loss.item() * len(ys[i:i + batch])
            rows += len(ys[i:i + batch])
        with torch.no_grad():
            acc = float((model(torch.tensor(xt)).argmax(1).numpy() == yt).mean())
        out.append({"epoch": e + 1, "loss": total / rows, "accuracy": acc})
        if log:
            print(f"epoch {e + 1}: loss {total / rows:.6f}, test accuracy {100 * acc:.2f}%", file=log, flush=True)
    return out


def save_params(model, d):
    d.mkdir(parents=True, exist_ok=True)
    for name, p in model.state_dict().items():
        np.save(d / f"{name}.npy", p.detach().numpy().astype(np.float32))


def digits_main():
    torch.set_num_threads(1)
    x, y, xt, yt = digits()
    torch.manual_seed(0)
    model = mlp([64, 32, 10])
    init = {k: v.clone() for k, v in model.state_dict().items()}
    REF.mkdir(exist_ok=True)
    torch.onnx.export(model, torch.zeros(1, 64), str(REF / "digits_mlp_untrained.onnx"), input_names=["x"],
                      output_names=["logits"], dynamic_axes={"x": {0: "batch"}, "logits": {0: "batch"}},
                      opset_version=13)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    for s in range(3):
        opt.zero_grad()
        loss_fn(model(torch.tensor(x[32 * s:32 * s + 32])), torch.tensor(y[32 * s:32 * s + 32])).backward()
        opt.step()
        if s in (0, 2):
            save_params(model, REF / f"step{s + 1}")
    model.load_state_dict(init)
    cfg = {"epochs": 5, "batch": 32, "lr": 0.05, "momentum": 0.9, "weight_decay": 1e-4}
    epochs = train(model, x, y, xt, yt, cfg["epochs"], cfg["batch"], cfg["lr"], cfg["momentum"], cfg["weight_decay"])
    doc = {"model": "digits_mlp_untrained.onnx", "data": "examples/digits/digits_x.npy / 16, rows 0..1439 train, "
           "1440..1796 test, file order", "torch": torch.__version__, **cfg, "per_epoch": epochs}
    (REF / "digits_reference.json").write_text(json.dumps(doc, indent=2) + "\n")
    print(json.dumps(doc, indent=2))


def fashion_main(model_path, data_dir, epochs=5, batch=64, lr=0.05, momentum=0.9, limit=0):
    torch.set_num_threads(1)
    data_dir = pathlib.Path(data_dir)
    m = onnx.load(model_path)
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in m.graph.initializer}
    sizes = [inits["fc1.weight"].shape[1]] + [inits[f"fc{i}.weight"].shape[0] for i in range(1, 10)
                                               if f"fc{i}.weight" in inits]
    model = mlp(sizes)
    model.load_state_dict({k: torch.tensor(v) for k, v in inits.items()})
    x = np.load(data_dir / "train_x.npy").reshape(-1, sizes[0])
    y = np.load(data_dir / "train_y.npy")
    if limit:
        x, y = x[:limit], y[:limit]
    xt = np.load(data_dir / "test_x.npy").reshape(-1, sizes[0])
    yt = np.load(data_dir / "test_y.npy")
    out = train(model, x, y, xt, yt, epochs, batch, lr, momentum, 0.0, log=sys.stderr)
    print(json.dumps({"model": str(model_path), "sizes": sizes, "rows": len(x), "epochs": epochs, "batch": batch,
                      "lr": lr, "momentum": momentum, "torch": torch.__version__, "per_epoch": out}, indent=2))


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] == "digits":
        digits_main()
    elif sys.argv[1] == "fashion":
        a = sys.argv[2:]
        fashion_main(a[0], a[1], *(int(a[2]), int(a[3]), float(a[4]), float(a[5]), int(a[6]))[:len(a) - 2])
    else:
        sys.exit(__doc__)
