#!/usr/bin/python3
"""Fashion-MNIST (Debian's dataset-fashion-mnist: IDX files, gzip) to .npy for `tpuw train`.

Needs only python3-numpy (system Python, hence the shebang).

    ./convert.py OUT_DIR [--src /usr/share/datasets/fashion-mnist] [--image] [--train-rows N] [--test-rows N]

writes OUT_DIR/train_x.npy, train_y.npy, test_x.npy, test_y.npy: inputs float32 scaled to [0, 1]
(pixel / 255), [N, 784] (or [N, 1, 28, 28] with --image), labels int64 [N] (0 T-shirt/top,
1 Trouser, 2 Pullover, 3 Dress, 4 Coat, 5 Sandal, 6 Shirt, 7 Sneaker, 8 Bag, 9 Ankle boot), in the
files' order (the first N rows with --train-rows/--test-rows).
"""
import argparse
import gzip
import pathlib
import struct
import sys

import numpy as np


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    if len(data) < 4:
        sys.exit(f"{path}: too short for an IDX file")
    zero, dtype, ndim = struct.unpack(">HBB", data[:4])
    if zero != 0 or dtype != 0x08:
        sys.exit(f"{path}: not an IDX file of unsigned bytes (magic {data[:4].hex()})")
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    body = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim)
    if body.size != int(np.prod(dims)):
        sys.exit(f"{path}: {body.size} bytes of data for dims {dims}")
    return body.reshape(dims)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=pathlib.Path)
    ap.add_argument("--src", type=pathlib.Path, default=pathlib.Path("/usr/share/datasets/fashion-mnist"))
    ap.add_argument("--image", action="store_true", help="inputs [N, 1, 28, 28] instead of [N, 784]")
    ap.add_argument("--train-rows", type=int, default=0)
    ap.add_argument("--test-rows", type=int, default=0)
    a = ap.parse_args()
    if not (a.src / "train-images-idx3-ubyte.gz").exists():
        sys.exit(f"{a.src}: no Fashion-MNIST files (install Debian's dataset-fashion-mnist)")
    a.out.mkdir(parents=True, exist_ok=True)
    for split, prefix, rows in (("train", "train", a.train_rows), ("test", "t10k", a.test_rows)):
        x = read_idx(a.src / f"{prefix}-images-idx3-ubyte.gz")
        y = read_idx(a.src / f"{prefix}-labels-idx1-ubyte.gz")
        if len(x) != len(y):
            sys.exit(f"{split}: {len(x)} images but {len(y)} labels")
        if rows:
            x, y = x[:rows], y[:rows]
        x = x.astype(np.float32) / np.float32(255.0)
        x = x.reshape(len(x), 1, 28, 28) if a.image else x.reshape(len(x), 784)
        np.save(a.out / f"{split}_x.npy", x)
        np.save(a.out / f"{split}_y.npy", y.astype(np.int64))
        print(f"{split}: {x.shape} float32, labels {y.shape} int64 -> {a.out}")


if __name__ == "__main__":
    main()
