#!/usr/bin/python3
"""Train a small LeNet-style CNN on the 8x8 digits and export it to ONNX (issue 13).

Needs Debian's python3-torch, python3-onnx and python3-numpy (system Python, hence the shebang).
Everything it writes is committed, so the tests do not need PyTorch:

  digits_cnn.onnx           Conv(1->16, 3x3, pad 1) -> ReLU -> AvgPool(2) -> Conv(16->32, 3x3, pad 1)
                            -> ReLU -> AvgPool(2) -> x.view(x.size(0), -1) -> Linear(128, 10) -> Softmax;
                            input "image" [batch, 1, 8, 8] float32 (raw intensities 0..16),
                            output "probs" [batch, 10]
  digits_cnn_expected.npy   float32 [359, 10]: PyTorch's probabilities for test_x.npy

It uses train_export.py's split (test_x.npy / calib_x.npy and the same permutation, NumPy seed 0)
and is seeded (torch seed 0).
"""
import pathlib

import numpy as np
import torch
from torch import nn

HERE = pathlib.Path(__file__).resolve().parent
SPLIT_SEED = 0
TORCH_SEED = 0
EPOCHS = 60


class Cnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.pool = nn.AvgPool2d(2)
        self.fc = nn.Linear(128, 10)

    def forward(self, x):
        x = self.pool(torch.relu(self.conv1(x)))
        x = self.pool(torch.relu(self.conv2(x)))
        return self.fc(x.view(x.size(0), -1))


def main():
    x = np.load(HERE / "digits_x.npy")  # uint8 [1797, 64], 0..16
    y = np.load(HERE / "digits_y.npy")
    perm = np.random.RandomState(SPLIT_SEED).permutation(len(x))
    n_test = len(x) // 5
    test_idx, train_idx = perm[:n_test], perm[n_test:]
    assert (x[test_idx] == np.load(HERE / "test_x.npy")).all()

    torch.manual_seed(TORCH_SEED)
    model = Cnn()
    xt = torch.tensor(x[train_idx], dtype=torch.float32).view(-1, 1, 8, 8)
    yt = torch.tensor(y[train_idx], dtype=torch.long)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3, weight_decay=1e-4)
    loss_fn = nn.CrossEntropyLoss()
    gen = torch.Generator().manual_seed(TORCH_SEED)
    for _ in range(EPOCHS):
        order = torch.randperm(len(xt), generator=gen)
        for i in range(0, len(xt), 64):
            b = order[i:i + 64]
            opt.zero_grad()
            loss_fn(model(xt[b]), yt[b]).backward()
            opt.step()
    model.eval()

    exported = nn.Sequential(model, nn.Softmax(dim=1))
    torch.onnx.export(exported, torch.zeros(1, 1, 8, 8), str(HERE / "digits_cnn.onnx"),
                      input_names=["image"], output_names=["probs"],
                      dynamic_axes={"image": {0: "batch"}, "probs": {0: "batch"}}, opset_version=13)
    with torch.no_grad():
        xte = torch.tensor(x[test_idx], dtype=torch.float32).view(-1, 1, 8, 8)
        probs = exported(xte).numpy().astype(np.float32)
    np.save(HERE / "digits_cnn_expected.npy", probs)
    acc = (probs.argmax(1) == y[test_idx]).mean()
    print(f"digits CNN: test accuracy {100 * acc:.2f}% (PyTorch float)")


if __name__ == "__main__":
    main()
