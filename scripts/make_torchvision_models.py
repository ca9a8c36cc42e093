#!/usr/bin/python3
"""torchvision model families with random weights, exported to ONNX for the compiler's import and
lowering tests (issue 25, "torchvision families"; docs/network_compiler.md, "torchvision families").

Needs Debian's python3-torch, python3-torchvision, python3-onnx and python3-numpy (system Python,
hence the shebang). The files are tens of MB each, so they are not committed: the ctest test
tests/integration/torchvision/torchvision_test.py runs this script into the build tree.

For every family (resnet18, mobilenet_v2, squeezenet1_1, shufflenet_v2_x0_5, efficientnet_b0,
regnet_x_400mf) and every BatchNorm variant:
  fresh     PyTorch's initialization (running_mean 0, running_var 1, weight 1, bias 0): the
            exporter folds BN into the convolutions and stores the many equal bias vectors once,
            so several Conv nodes share one bias initializer
  trained   running_mean, running_var, weight and bias drawn at random (seeded), as after training
it writes, into OUT_DIR:
  NAME_BN.onnx           eval mode, opset 13, input 'x' [batch, 3, 32, 32] (batch dynamic),
                         output 'logits' [batch, 1000]
  NAME_BN_x.npy          float32 [2, 3, 32, 32], the input (torch seed 1000 + family index)
  NAME_BN_expected.npy   float32 [2, 1000], PyTorch's fp32 logits for it
Weights are torchvision's own random initialization under torch.manual_seed(family index), so
every run writes the same tensors. An existing file set is left alone unless --force.

usage: make_torchvision_models.py OUT_DIR [--only NAME ...] [--force]
"""
import argparse
import pathlib
import sys

import numpy as np
import torch
import torchvision

FAMILIES = [
    "resnet18",
    "mobilenet_v2",
    "squeezenet1_1",
    "shufflenet_v2_x0_5",
    "efficientnet_b0",
    "regnet_x_400mf",
]
VARIANTS = ["fresh", "trained"]
BATCH, SIZE, OPSET = 2, 32, 13


def randomize_batchnorm(model, seed):
    """'Trained' statistics: every BatchNorm gets random running_mean/var, weight and bias."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
                c = m.num_features
                m.running_mean.copy_((torch.rand(c, generator=gen) - 0.5) * 0.4)
                m.running_var.copy_(torch.rand(c, generator=gen) * 1.5 + 0.5)
                m.weight.copy_(torch.rand(c, generator=gen) + 0.5)
                m.bias.copy_((torch.rand(c, generator=gen) - 0.5) * 0.4)


def build(family, variant, index):
    torch.manual_seed(index)
    model = getattr(torchvision.models, family)(weights=None)
    if variant == "trained":
        randomize_batchnorm(model, 100 + index)
    return model.eval()


def export(family, variant, index, out_dir, force):
    name = f"{family}_{variant}"
    onnx_path = out_dir / f"{name}.onnx"
    x_path = out_dir / f"{name}_x.npy"
    y_path = out_dir / f"{name}_expected.npy"
    if not force and onnx_path.exists() and x_path.exists() and y_path.exists():
        return name, False
    model = build(family, variant, index)
    gen = torch.Generator().manual_seed(1000 + index)
    x = torch.randn(BATCH, 3, SIZE, SIZE, generator=gen)
    with torch.no_grad():
        y = model(x)
    tmp = onnx_path.with_suffix(".onnx.tmp")
    torch.onnx.export(model, x, str(tmp), opset_version=OPSET, input_names=["x"], output_names=["logits"],
                      dynamic_axes={"x": {0: "batch"}, "logits": {0: "batch"}}, do_constant_folding=True)
    np.save(x_path, x.numpy().astype(np.float32))
    np.save(y_path, y.numpy().astype(np.float32))
    tmp.replace(onnx_path)  # last: a complete .onnx means a complete set
    return name, True


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir", type=pathlib.Path)
    ap.add_argument("--only", nargs="*", default=None, help="family names (default: all)")
    ap.add_argument("--variants", nargs="*", default=VARIANTS, choices=VARIANTS)
    ap.add_argument("--force", action="store_true", help="rewrite existing files")
    args = ap.parse_args()
    only = args.only or FAMILIES
    for f in only:
        if f not in FAMILIES:
            sys.exit(f"unknown family '{f}' (known: {', '.join(FAMILIES)})")
    args.out_dir.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)
    for index, family in enumerate(FAMILIES):
        if family not in only:
            continue
        for variant in args.variants:
            name, wrote = export(family, variant, index, args.out_dir, args.force)
            print(f"{name}: {'written' if wrote else 'up to date'}", flush=True)


if __name__ == "__main__":
    main()
