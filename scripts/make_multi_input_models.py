#!/usr/bin/python3
"""Models with several graph inputs, exported from PyTorch, for `tpuw run` (issue 13).

Needs Debian's python3-torch, python3-onnx and python3-numpy (system Python, hence the shebang).
Writes into examples/multi_input/ (committed, so the tests run without PyTorch); the weights are
PyTorch's seeded initialization (the tests compare the device with the float model), every model
is exported in eval mode (opset 13, dynamic batch on every input):

  concat_mlp.onnx     a [batch, 6], b [batch, 10] -> Concat -> Linear(16, 24) -> ReLU -> Linear(24, 5)
  add_branches.onnx   a [batch, 8] -> Linear(8, 16), b [batch, 12] -> Linear(12, 16) (weights / 100),
                      added, ReLU, Linear(16, 4); b's rows are 100x a's (different input scales
                      on purpose: their products meet in one accumulator)
  NAME_a.npy, NAME_b.npy   float32 inputs, 64 rows (NumPy seed 3)
  NAME_expected.npy        float32: PyTorch's output for them

    scripts/make_multi_input_models.py
"""
import pathlib

import numpy as np
import torch
from torch import nn

OUT = pathlib.Path(__file__).resolve().parent.parent / "examples" / "multi_input"


class ConcatMlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 24)
        self.fc2 = nn.Linear(24, 5)

    def forward(self, a, b):
        return self.fc2(torch.relu(self.fc1(torch.cat([a, b], dim=1))))


class AddBranches(nn.Module):
    def __init__(self):
        super().__init__()
        self.fa = nn.Linear(8, 16)
        self.fb = nn.Linear(12, 16)
        with torch.no_grad():
            self.fb.weight.mul_(0.01)
        self.fc = nn.Linear(16, 4)

    def forward(self, a, b):
        return self.fc(torch.relu(self.fa(a) + self.fb(b)))


def export(name, model, shapes, scales):
    model.eval()
    rng = np.random.default_rng(3)
    xs = [(rng.standard_normal((64, f)) * s).astype(np.float32) for f, s in zip(shapes, scales)]
    with torch.no_grad():
        y = model(*[torch.from_numpy(x) for x in xs]).numpy().astype(np.float32)
    names = ["a", "b"]
    path = OUT / f"{name}.onnx"
    torch.onnx.export(model, tuple(torch.from_numpy(x[:2]) for x in xs), str(path), opset_version=13,
                      input_names=names, output_names=["y"],
                      dynamic_axes={**{n: {0: "batch"} for n in names}, "y": {0: "batch"}})
    for n, x in zip(names, xs):
        np.save(OUT / f"{name}_{n}.npy", x)
    np.save(OUT / f"{name}_expected.npy", y)
    print(f"{path}: inputs {[x.shape for x in xs]} -> {y.shape}")


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(7)
    export("concat_mlp", ConcatMlp(), (6, 10), (1.0, 1.0))
    export("add_branches", AddBranches(), (8, 12), (1.0, 100.0))


if __name__ == "__main__":
    main()
