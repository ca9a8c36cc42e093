#!/usr/bin/python3
"""CNN blocks with activation functions after the convolutions, exported from PyTorch for the int8
lookup-table path of the CNN compiler (issue 13; docs/network_compiler.md, "Activation functions
after convolutions").

Needs Debian's python3-torch, python3-onnx and python3-numpy (system Python, hence the shebang).
Seeded PyTorch initialization, seeded BatchNorm statistics, eval mode, opset 13 (14 for mobilenet_block: HardSwish), dynamic batch, as
make_models.py. Everything it writes is committed, so the tests do not need PyTorch:

  mobilenet_block.onnx   MobileNetV3-style on [batch, 3, 12, 12]: conv3x3 stride 2 (3 -> 16)-BN-
                         Hardswish, depthwise conv3x3 (groups 16)-BN-ReLU6, pointwise conv1x1
                         (16 -> 24)-BN, AvgPool 3x3 stride 1 pad 1 count_include_pad=False,
                         GlobalAveragePool -> flatten -> Linear(24, 10)
  act_chain.onnx         [batch, 4, 8, 8]: conv3x3-Sigmoid, conv3x3-Tanh, conv1x1-LeakyReLU(0.1),
                         conv3x3-GELU (PyTorch's Erf form), conv1x1-Hardsigmoid; output the map
                         [batch, 8, 8, 8]
  two_outputs.onnx       act_chain's layers with two graph outputs: 'mid' (the Tanh layer's map)
                         and 'y' (the last map); two_outputs_expected.npy holds 'y',
                         two_outputs_mid.npy 'mid'
  NAME_x.npy             float32 input, 32 images (NumPy seed 2)
  NAME_expected.npy      float32: PyTorch's output for NAME_x.npy
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


class MobileNetBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem, self.bn0 = nn.Conv2d(3, 16, 3, stride=2, padding=1, bias=False), bn(16)
        self.dw, self.bn1 = nn.Conv2d(16, 16, 3, padding=1, groups=16, bias=False), bn(16)
        self.pw, self.bn2 = nn.Conv2d(16, 24, 1, bias=False), bn(24)
        self.avg = nn.AvgPool2d(3, stride=1, padding=1, count_include_pad=False)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(24, 10)

    def forward(self, x):
        y = nn.functional.hardswish(self.bn0(self.stem(x)))
        y = nn.functional.relu6(self.bn1(self.dw(y)))
        y = self.avg(self.bn2(self.pw(y)))
        return self.fc(torch.flatten(self.pool(y), 1))


class ActChain(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(4, 8, 3, padding=1)
        self.c2 = nn.Conv2d(8, 8, 3, padding=1)
        self.c3 = nn.Conv2d(8, 8, 1)
        self.c4 = nn.Conv2d(8, 8, 3, padding=1)
        self.c5 = nn.Conv2d(8, 8, 1)

    def forward(self, x):
        y = torch.sigmoid(self.c1(x))
        y = torch.tanh(self.c2(y))
        y = nn.functional.leaky_relu(self.c3(y), 0.1)
        y = nn.functional.gelu(self.c4(y))
        return nn.functional.hardsigmoid(self.c5(y))


class TwoOutputs(ActChain):
    def forward(self, x):
        mid = torch.tanh(self.c2(torch.sigmoid(self.c1(x))))
        y = nn.functional.leaky_relu(self.c3(mid), 0.1)
        y = nn.functional.gelu(self.c4(y))
        return mid, nn.functional.hardsigmoid(self.c5(y))


def export(name, model, shape, opset=13, outputs=("y",)):
    model.eval()
    x = np.random.RandomState(2).uniform(-1, 1, size=(32,) + shape).astype(np.float32)
    axes = {"x": {0: "batch"}}
    axes.update({o: {0: "batch"} for o in outputs})
    torch.onnx.export(model, torch.zeros((1,) + shape), str(HERE / f"{name}.onnx"), input_names=["x"],
                      output_names=list(outputs), dynamic_axes=axes, opset_version=opset,
                      training=torch.onnx.TrainingMode.PRESERVE, do_constant_folding=True)
    with torch.no_grad():
        ys = model(torch.from_numpy(x))
    ys = ys if isinstance(ys, tuple) else (ys,)
    np.save(HERE / f"{name}_x.npy", x)
    for o, y in zip(outputs, ys):
        np.save(HERE / (f"{name}_expected.npy" if o == "y" else f"{name}_{o}.npy"), y.numpy().astype(np.float32))
    print(f"{name}: {list(x.shape)} -> {[list(y.shape) for y in ys]}")


def main():
    torch.manual_seed(0)
    export("mobilenet_block", MobileNetBlock(), (3, 12, 12), opset=14)  # 14: HardSwish is one node
    export("act_chain", ActChain(), (4, 8, 8))
    torch.manual_seed(1)
    export("two_outputs", TwoOutputs(), (4, 8, 8), outputs=("mid", "y"))


if __name__ == "__main__":
    main()
