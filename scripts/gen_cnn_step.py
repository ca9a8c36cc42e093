#!/usr/bin/python3
"""Two SGD steps of small CNNs in PyTorch, for tests/unit/training/cnn_trainer_test.cpp.

Writes tests/unit/training/data/cnn_step/<model>.onnx (the untrained model, exported as
torch.onnx.export does: Conv with bias, Gemm transB=1), <model>_x.npy (float32 NCHW, 2 x batch
images, bf16-representable), <model>_y.npy (int64 labels) and <model>_after/<initializer>.npy (the
parameters after two steps: rows 0..batch-1, then batch..2*batch-1; CrossEntropyLoss mean,
torch.optim.SGD lr 0.05, momentum 0.9, weight decay 0.01), <model>_loss.npy (the two losses).
Run with Debian's python3-torch: /usr/bin/python3 scripts/gen_cnn_step.py [MODEL ...] (default: all;
poolnet, gapnet, resnet: a ResNet basic block with a residual Add)
"""
import os
import sys

import numpy as np
import torch
from torch import nn

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "unit", "training", "data", "cnn_step")
BATCH = 8


class PoolNet(nn.Module):  # Conv-Relu-MaxPool-Conv-Relu-AvgPool-Flatten-Linear-Relu-Linear
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 4, 3, padding=1)
        self.conv2 = nn.Conv2d(4, 8, 3, padding=1)
        self.fc1 = nn.Linear(32, 16)
        self.fc2 = nn.Linear(16, 10)

    def forward(self, x):
        x = torch.max_pool2d(torch.relu(self.conv1(x)), 2)
        x = torch.nn.functional.avg_pool2d(torch.relu(self.conv2(x)), 2)
        x = torch.flatten(x, 1)
        return self.fc2(torch.relu(self.fc1(x)))


class GapNet(nn.Module):  # Conv(s2)-Relu-Conv(no bias)-Relu-GlobalAveragePool-Flatten-Linear
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 6, 3, stride=2, padding=1)
        self.conv2 = nn.Conv2d(6, 20, 3, padding=1, bias=False)
        self.fc = nn.Linear(20, 5)

    def forward(self, x):
        x = torch.relu(self.conv2(torch.relu(self.conv1(x))))
        x = torch.flatten(torch.nn.functional.adaptive_avg_pool2d(x, 1), 1)
        return self.fc(x)


class ResNet(nn.Module):  # Conv-Relu, then a basic block Conv-Relu-Conv + skip, Add, Relu; MaxPool-Flatten-Linear
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 4, 3, padding=1)
        self.conv2 = nn.Conv2d(4, 4, 3, padding=1)
        self.conv3 = nn.Conv2d(4, 4, 3, padding=1)
        self.fc = nn.Linear(64, 6)

    def forward(self, x):
        x = torch.relu(self.conv1(x))
        x = torch.relu(self.conv3(torch.relu(self.conv2(x))) + x)
        x = torch.flatten(torch.max_pool2d(x, 2), 1)
        return self.fc(x)


def bf16(t):
    return t.to(torch.bfloat16).to(torch.float32)


def run(name, model, shape, classes, seed):
    torch.manual_seed(seed)
    m = model()
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(bf16(p))
    torch.onnx.export(m, torch.zeros(1, *shape), os.path.join(OUT, f"{name}.onnx"), input_names=["x"],
                      output_names=["logits"], dynamic_axes={"x": {0: "batch"}, "logits": {0: "batch"}},
                      opset_version=13)
    x = bf16(torch.randn(2 * BATCH, *shape))
    y = torch.randint(0, classes, (2 * BATCH,))
    np.save(os.path.join(OUT, f"{name}_x.npy"), x.numpy().astype(np.float32))
    np.save(os.path.join(OUT, f"{name}_y.npy"), y.numpy().astype(np.int64))
    opt = torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9, weight_decay=0.01)
    losses = []
    for s in range(2):
        opt.zero_grad()
        loss = nn.CrossEntropyLoss()(m(x[s * BATCH:(s + 1) * BATCH]), y[s * BATCH:(s + 1) * BATCH])
        loss.backward()
        opt.step()
        losses.append(loss.item())
    np.save(os.path.join(OUT, f"{name}_loss.npy"), np.array(losses, dtype=np.float32))
    after = os.path.join(OUT, f"{name}_after")
    os.makedirs(after, exist_ok=True)
    for k, v in m.state_dict().items():
        np.save(os.path.join(after, f"{k}.npy"), v.numpy().astype(np.float32))


MODELS = {
    "poolnet": (PoolNet, (1, 8, 8), 10, 1),
    "gapnet": (GapNet, (3, 9, 9), 5, 2),
    "resnet": (ResNet, (3, 8, 8), 6, 3),
}


def main():
    """Writes every model, or only those named on the command line."""
    os.makedirs(OUT, exist_ok=True)
    for name in sys.argv[1:] or MODELS:
        model, shape, classes, seed = MODELS[name]
        run(name, model, shape, classes, seed=seed)


if __name__ == "__main__":
    main()
