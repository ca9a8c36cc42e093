#!/usr/bin/python3
"""Conv / pool gradients from PyTorch for tests/unit/runtime/conv_train_bf16_test.cpp.

Writes tests/unit/runtime/data/conv_grads/<case>_<name>.npy (float32): the layer input x, the
weights w and bias b (convolutions), the output gradient dy, and PyTorch's gradients dx, dw, db
of sum(y * dy). x and w are bf16-representable (rounded with torch.bfloat16), so the device and
PyTorch see the same inputs and a max pool the same ties. Run with Debian's python3-torch:
  /usr/bin/python3 scripts/gen_conv_grads.py
"""
import os

import numpy as np
import torch
import torch.nn.functional as F

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "unit", "runtime", "data",
                   "conv_grads")


def bf16(t):
    return t.to(torch.bfloat16).to(torch.float32)


def save(case, **arrays):
    for name, a in arrays.items():
        np.save(os.path.join(OUT, f"{case}_{name}.npy"), a.detach().numpy().astype(np.float32))


def conv_case(case, batch, c, h, w, o, k, stride, pad, dil, seed):
    g = torch.Generator().manual_seed(seed)
    x = bf16(torch.randn(batch, c, h, w, generator=g)).requires_grad_()
    wt = bf16(torch.randn(o, c, k, k, generator=g) / (c * k * k) ** 0.5).requires_grad_()
    b = (torch.rand(o, generator=g) - 0.5).requires_grad_()
    y = F.conv2d(x, wt, b, stride=stride, padding=pad, dilation=dil)
    dy = torch.randn(y.shape, generator=g)
    (y * dy).sum().backward()
    save(case, x=x, w=wt, b=b, dy=dy, dx=x.grad, dw=wt.grad, db=b.grad)


def pool_case(case, kind, batch, c, h, w, k, stride, pad, seed):
    g = torch.Generator().manual_seed(seed)
    x = bf16(torch.randn(batch, c, h, w, generator=g))
    if kind == "max":
        x = torch.round(x * 2) / 2  # a coarse grid: ties inside windows
    x.requires_grad_()
    if kind == "max":
        y = F.max_pool2d(x, k, stride, pad)
    else:
        y = F.avg_pool2d(x, k, stride, pad, count_include_pad=True)
    dy = torch.randn(y.shape, generator=g)
    (y * dy).sum().backward()
    save(case, x=x, dy=dy, dx=x.grad)


def main():
    os.makedirs(OUT, exist_ok=True)
    conv_case("conv_s1", 2, 5, 7, 6, 6, 3, 1, 1, 1, seed=1)
    conv_case("conv_s2", 3, 20, 9, 8, 18, 3, 2, 1, 1, seed=2)
    conv_case("conv_d2", 2, 4, 9, 9, 5, 3, 1, 2, 2, seed=3)
    conv_case("conv_k5", 2, 3, 12, 12, 8, 5, 2, 2, 1, seed=4)
    pool_case("avg_3s2", "avg", 2, 6, 9, 9, 3, 2, 1, seed=5)
    pool_case("max_2s2", "max", 2, 6, 8, 8, 2, 2, 0, seed=6)
    pool_case("max_3s2", "max", 2, 5, 9, 9, 3, 2, 1, seed=7)


if __name__ == "__main__":
    main()
