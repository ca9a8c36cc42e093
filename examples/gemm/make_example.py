#!/usr/bin/python3
"""Writes the built-in GEMM example: a.npy int8 [100, 70] and b.npy int8 [70, 50] (seeded), plus
c_expected.npy int32 [100, 50] = a @ b. Shapes are deliberately not multiples of the array size.
Needs Debian's python3-numpy; the outputs are committed, so running the example does not."""
import pathlib
import numpy as np

here = pathlib.Path(__file__).resolve().parent
rng = np.random.default_rng(2026)
a = rng.integers(-128, 128, size=(100, 70), dtype=np.int8)
b = rng.integers(-128, 128, size=(70, 50), dtype=np.int8)
np.save(here / "a.npy", a)
np.save(here / "b.npy", b)
np.save(here / "c_expected.npy", a.astype(np.int32) @ b.astype(np.int32))
