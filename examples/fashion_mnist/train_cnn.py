#!/usr/bin/python3
"""Train a small LeNet-style CNN on Fashion-MNIST with PyTorch and export it to ONNX (issue 13).

PyTorch trains it here (Adam); `tpuw run` then runs it in int8 (run_cnn.sh). train_cnn_device.py
trains the same model on the device (`tpuw train`, bf16, SGD) next to PyTorch. Needs Debian's python3-torch, python3-onnx,
python3-numpy and dataset-fashion-mnist (system Python, hence the shebang). Everything it writes
is committed, so the tests need neither PyTorch nor the dataset:

  fashion_cnn.onnx           Conv(1->8, 3x3, pad 1) -> ReLU -> MaxPool(2) -> Conv(8->16, 4x4) -> ReLU
                             -> MaxPool(2, ceil_mode) -> x.view(x.size(0), -1) -> Linear(576, 10);
                             input "image" [batch, 1, 28, 28] float32 in raw pixel values 0..255
                             (training used pixel / 255; the 1/255 is folded into conv1's weights),
                             output "logits" [batch, 10]
  fashion_test_x.npy         uint8 [1000, 1, 28, 28]: the first 1000 test images
  fashion_test_y.npy         int64 [1000]: their labels
  fashion_cnn_expected.npy   float32 [1000, 10]: PyTorch's logits for them

    ./train_cnn.py [--src /usr/share/datasets/fashion-mnist] [--epochs 3]

Seeded (torch seed 0, one thread); trains on all 60 000 training images in a seeded order.
"""
import argparse
import pathlib
import sys

import numpy as np
import torch
from torch import nn

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from convert import read_idx  # noqa: E402

TEST_ROWS = 1000


class FashionCnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 16, 4)
        self.pool1 = nn.MaxPool2d(2)
        self.pool2 = nn.MaxPool2d(2, ceil_mode=True)  # 11x11 -> 6x6: a partial last window
        self.fc = nn.Linear(16 * 6 * 6, 10)

    def forward(self, x):
        x = self.pool1(torch.relu(self.conv1(x)))
        x = self.pool2(torch.relu(self.conv2(x)))
        return self.fc(x.view(x.size(0), -1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--src", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--epochs", type=int, default=3)
    a = ap.parse_args()
    src = pathlib.Path(a.src)
    xtr = read_idx(src / "train-images-idx3-ubyte.gz").reshape(-1, 1, 28, 28)
    ytr = read_idx(src / "train-labels-idx1-ubyte.gz").astype(np.int64)
    xte = read_idx(src / "t10k-images-idx3-ubyte.gz").reshape(-1, 1, 28, 28)
    yte = read_idx(src / "t10k-labels-idx1-ubyte.gz").astype(np.int64)

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = FashionCnn()
    xt = torch.tensor(xtr, dtype=torch.float32) / 255.0
    yt = torch.tensor(ytr)
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    loss_fn = nn.CrossEntropyLoss()
    gen = torch.Generator().manual_seed(0)
    for epoch in range(a.epochs):
        order = torch.randperm(len(xt), generator=gen)
        total = 0.0
        for i in range(0, len(xt), 64):
            b = order[i:i + 64]
            opt.zero_grad()
            loss = loss_fn(model(xt[b]), yt[b])
            loss.backward()
            opt.step()
            total += loss.item() * len(b)
        print(f"epoch {epoch + 1}: loss {total / len(xt):.4f}")
    model.eval()
    with torch.no_grad():
        model.conv1.weight /= 255.0  # the exported model reads raw pixels 0..255
        full = model(torch.tensor(xte, dtype=torch.float32)).numpy()
    print(f"fashion CNN: test accuracy {100 * (full.argmax(1) == yte).mean():.2f}% on all {len(yte)} "
          f"(PyTorch float), {100 * (full[:TEST_ROWS].argmax(1) == yte[:TEST_ROWS]).mean():.2f}% on the first "
          f"{TEST_ROWS}")
    torch.onnx.export(model, torch.zeros(1, 1, 28, 28), str(HERE / "fashion_cnn.onnx"),
                      input_names=["image"], output_names=["logits"],
                      dynamic_axes={"image": {0: "batch"}, "logits": {0: "batch"}}, opset_version=13)
    np.save(HERE / "fashion_test_x.npy", xte[:TEST_ROWS].astype(np.uint8))
    np.save(HERE / "fashion_test_y.npy", yte[:TEST_ROWS])
    np.save(HERE / "fashion_cnn_expected.npy", full[:TEST_ROWS].astype(np.float32))


if __name__ == "__main__":
    main()
