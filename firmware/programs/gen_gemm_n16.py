#!/usr/bin/python3
"""Writes the data files of gemm_n16.s and prints its .expect block.

A[i][k] = (7i + 3k) mod 17 - 8 and W[k][n] = (5k + 11n) mod 13 - 6 (16x16 int8, row-major);
C = A * W as int32. Run from anywhere; the files land next to this script.
"""
import os
import struct

N = 16
here = os.path.dirname(os.path.abspath(__file__))
A = [[(7 * i + 3 * k) % 17 - 8 for k in range(N)] for i in range(N)]
W = [[(5 * k + 11 * n) % 13 - 6 for n in range(N)] for k in range(N)]
C = [[sum(A[i][k] * W[k][n] for k in range(N)) for n in range(N)] for i in range(N)]

with open(os.path.join(here, "gemm_n16_a.bin"), "wb") as f:
    f.write(struct.pack(f"{N * N}b", *[v for row in A for v in row]))
with open(os.path.join(here, "gemm_n16_w.bin"), "wb") as f:
    f.write(struct.pack(f"{N * N}b", *[v for row in W for v in row]))

lines = [".expect c     0x3000   int32 \\"]
for i, row in enumerate(C):
    tail = " \\" if i + 1 < N else ""
    lines.append("        " + " ".join(f"{v:4d}" for v in row) + tail)
print("\n".join(lines))
