#!/usr/bin/python3
"""Train a 64-32-10 MLP on the 8x8 digits, export it to ONNX, write the data split.

Needs Debian's python3-torch, python3-onnx and python3-numpy (system Python, hence the shebang).
Everything it writes is committed, so running the example does not need PyTorch:

  digits_mlp.onnx   Linear(64,32) -> ReLU -> Linear(32,10) -> Softmax, input "pixels" [batch, 64]
                    float32 (raw intensities 0..16), output "probs" [batch, 10]
  test_x.npy        uint8 [359, 64]  held-out 20% (never seen in training or calibration)
  test_y.npy        uint8 [359]      their labels
  calib_x.npy       uint8 [256, 64]  calibration rows for int8 quantization (from the training 80%)

The split is a fixed permutation (NumPy seed 0); training is seeded too (torch seed 0), so a rerun
reproduces the same files on the same PyTorch version.
"""
import pathlib

import numpy as np
import torch
from torch import nn

HERE = pathlib.Path(__file__).resolve().parent
SPLIT_SEED = 0
TORCH_SEED = 0
CALIB_ROWS = 256
EPOCHS = 300


def main():
    x = np.load(HERE / "digits_x.npy")  # uint8 [1797, 64], 0..16
    y = np.load(HERE / "digits_y.npy")  # uint8 [1797]
    perm = np.random.RandomState(SPLIT_SEED).permutation(len(x))
    n_test = len(x) // 5
    test_idx, train_idx = perm[:n_test], perm[n_test:]
    np.save(HERE / "test_x.npy", x[test_idx])
    np.save(HERE / "test_y.npy", y[test_idx])
    np.save(HERE / "calib_x.npy", x[train_idx[:CALIB_ROWS]])

    torch.manual_seed(TORCH_SEED)
    model = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))
    xt = torch.tensor(x[train_idx], dtype=torch.float32)
    yt = torch.tensor(y[train_idx], dtype=torch.long)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3, weight_decay=1e-4)
    loss_fn = nn.CrossEntropyLoss()
    gen = torch.Generator().manual_seed(TORCH_SEED)
    for _ in range(EPOCHS):
        order = torch.randperm(len(xt), generator=gen)
        for i in range(0, len(xt), 64):
            b = order[i:i + 64]
            opt.zero_grad()
            loss = loss_fn(model(xt[b]), yt[b])
            loss.backward()
            opt.step()
    model.eval()

    exported = nn.Sequential(model, nn.Softmax(dim=1))
    torch.onnx.export(exported, torch.zeros(1, 64), str(HERE / "digits_mlp.onnx"),
                      input_names=["pixels"], output_names=["probs"],
                      dynamic_axes={"pixels": {0: "batch"}, "probs": {0: "batch"}}, opset_version=13)

    with torch.no_grad():
        for name, idx in (("train", train_idx), ("test", test_idx)):
            pred = model(torch.tensor(x[idx], dtype=torch.float32)).argmax(1).numpy()
            print(f"float accuracy on {name} ({len(idx)} rows): {100.0 * np.mean(pred == y[idx]):.2f}%")
    print(f"wrote {HERE / 'digits_mlp.onnx'}, test_x.npy, test_y.npy, calib_x.npy")


if __name__ == "__main__":
    main()
