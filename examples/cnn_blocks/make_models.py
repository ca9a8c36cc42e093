#!/usr/bin/python3
"""Small CNN blocks exported from PyTorch for the int8 CNN compiler's tests (issue 13).

Needs Debian's python3-torch, python3-onnx and python3-numpy (system Python, hence the shebang).
The weights are PyTorch's seeded initialization (no training: the tests compare the device with
the float model, not accuracy), the BatchNorm statistics are seeded random values, every model
is exported in eval mode (opset 13, dynamic batch). Everything it writes is committed, so the
tests do not need PyTorch:

  residual_block.onnx     ResNet basic block on [batch, 8, 8, 8]: conv3x3-BN-ReLU-conv3x3-BN,
                          + x, ReLU, then GlobalAveragePool -> flatten -> Linear(8, 10)
  dwsep_block.onnx        depthwise-separable block on [batch, 8, 8, 8]: depthwise conv3x3
                          (groups 8)-BN-ReLU, pointwise conv1x1 (8 -> 16)-BN-ReLU; the output is
                          the feature map [batch, 16, 8, 8]
  concat_block.onnx       two branches on [batch, 4, 8, 8] (conv1x1 4 -> 6 + ReLU, conv3x3 4 -> 6
                          + ReLU) concatenated along the channels, then conv1x1 12 -> 8; output
                          the map [batch, 8, 8, 8]
  NAME_x.npy              float32 input, 16 images (NumPy seed 1)
  NAME_expected.npy       float32: PyTorch's output for NAME_x.npy
"""
import pathlib

import numpy as np
import torch
from torch import nn

HERE = pathlib.Path(__file__).resolve().parent


def bn(c):
    b = nn.BatchNorm2d(c)
    with torch.no_grad():
        b.weight.uniform_(0.5, 1.5)
        b.bias.uniform_(-0.3, 0.3)
        b.running_mean.uniform_(-0.3, 0.3)
        b.running_var.uniform_(0.5, 2.0)
    return b


class Residual(nn.Module):
    def __init__(self, c=8):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(c, c, 3, padding=1, bias=False), bn(c)
        self.conv2, self.bn2 = nn.Conv2d(c, c, 3, padding=1, bias=False), bn(c)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(c, 10)

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        y = torch.relu(self.bn2(self.conv2(y)) + x)
        return self.fc(torch.flatten(self.pool(y), 1))


class DwSep(nn.Module):
    def __init__(self, c=8, o=16):
        super().__init__()
        self.dw, self.bn1 = nn.Conv2d(c, c, 3, padding=1, groups=c, bias=False), bn(c)
        self.pw, self.bn2 = nn.Conv2d(c, o, 1, bias=False), bn(o)

    def forward(self, x):
        return torch.relu(self.bn2(self.pw(torch.relu(self.bn1(self.dw(x))))))


class Concat(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(4, 6, 1)
        self.b = nn.Conv2d(4, 6, 3, padding=1)
        self.c = nn.Conv2d(12, 8, 1)

    def forward(self, x):
        return self.c(torch.cat([torch.relu(self.a(x)), torch.relu(self.b(x))], dim=1))


def export(name, model, c):
    model.eval()
    x = np.random.RandomState(1).uniform(-1, 1, size=(16, c, 8, 8)).astype(np.float32)
    torch.onnx.export(model, torch.zeros(1, c, 8, 8), str(HERE / f"{name}.onnx"), input_names=["x"],
                      output_names=["y"], dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}}, opset_version=13,
                      training=torch.onnx.TrainingMode.PRESERVE, do_constant_folding=True)
    with torch.no_grad():
        y = model(torch.from_numpy(x)).numpy().astype(np.float32)
    np.save(HERE / f"{name}_x.npy", x)
    np.save(HERE / f"{name}_expected.npy", y)
    print(f"{name}: {list(x.shape)} -> {list(y.shape)}")


def main():
    torch.manual_seed(0)
    export("residual_block", Residual(), 8)
    export("dwsep_block", DwSep(), 8)
    export("concat_block", Concat(), 4)


if __name__ == "__main__":
    main()
