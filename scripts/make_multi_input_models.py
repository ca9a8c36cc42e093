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
  image_vector.onnx   x [batch, 1, 12, 12] -> Conv(1, 4, 3, pad 1) -> ReLU -> MaxPool(2) -> flatten,
                      Concat with v [batch, 5] (v is 20x x) -> Linear(149, 16) -> ReLU -> Linear(16, 3)
                      (an image and a side vector: the vector joins the dense head)
  two_images.onnx     a, b [batch, 2, 8, 8] (b is 10x a): y = ReLU(Conv_a(a)), z = ReLU(Conv_b(b)),
                      Concat(y + z, z) along the channels -> AvgPool(2) -> flatten -> Linear(64, 4)
                      (siamese-style branches joined by a residual Add and a channel Concat)
  concat_images.onnx  a, b [batch, 2, 8, 8] (b is 10x a): Concat(a, b) along the channels ->
                      Conv(4, 6, 3, pad 1) -> ReLU -> GlobalAveragePool -> flatten -> Linear(6, 3)
  NAME_a.npy, NAME_b.npy (NAME_x.npy, NAME_v.npy)   float32 inputs, 64 rows (dense) or 32 (CNNs),
                      NumPy seed 3
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


class ImageVector(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.fc1 = nn.Linear(4 * 6 * 6 + 5, 16)
        self.fc2 = nn.Linear(16, 3)

    def forward(self, x, v):
        h = torch.max_pool2d(torch.relu(self.conv(x)), 2)
        h = torch.cat([h.view(h.size(0), -1), v], dim=1)
        return self.fc2(torch.relu(self.fc1(h)))


class TwoImages(nn.Module):
    def __init__(self):
        super().__init__()
        self.ca = nn.Conv2d(2, 4, 3, padding=1)
        self.cb = nn.Conv2d(2, 4, 3, padding=1)
        with torch.no_grad():
            self.cb.weight.mul_(0.1)
        self.fc = nn.Linear(8 * 4 * 4, 4)

    def forward(self, a, b):
        y = torch.relu(self.ca(a))
        z = torch.relu(self.cb(b))
        h = nn.functional.avg_pool2d(torch.cat([y + z, z], dim=1), 2)
        return self.fc(torch.flatten(h, 1))


class ConcatImages(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 6, 3, padding=1)
        self.fc = nn.Linear(6, 3)

    def forward(self, a, b):
        h = torch.relu(self.conv(torch.cat([a, b], dim=1)))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(h, 1), 1))


def export(name, model, shapes, scales, names=("a", "b"), rows=64):
    model.eval()
    rng = np.random.default_rng(3)
    shapes = [(f,) if isinstance(f, int) else tuple(f) for f in shapes]
    xs = [(rng.standard_normal((rows,) + f) * s).astype(np.float32) for f, s in zip(shapes, scales)]
    with torch.no_grad():
        y = model(*[torch.from_numpy(x) for x in xs]).numpy().astype(np.float32)
    names = list(names)
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
    export("image_vector", ImageVector(), ((1, 12, 12), 5), (1.0, 20.0), names=("x", "v"), rows=32)
    export("two_images", TwoImages(), ((2, 8, 8), (2, 8, 8)), (1.0, 10.0), rows=32)
    export("concat_images", ConcatImages(), ((2, 8, 8), (2, 8, 8)), (1.0, 10.0), rows=32)


if __name__ == "__main__":
    main()
