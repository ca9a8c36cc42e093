#!/usr/bin/python3
"""Coefficients of the bf16 smooth activation functions on the VECTOR unit (issue 13).

tanh and erf are odd; on the device they run as (host/src/runtime/vector_functions.cpp)

    t = clamp(x, -L, L);  w = 2 t^2 / L^2 - 1  (in [-1, 1]);  f(x) ~= t * g(w),
    g(w) = sum_k c_k T_k(w)  (Chebyshev, evaluated by Clenshaw's recurrence with VECTOR ops),

so outside [-L, L] the result saturates at +-L*g(1) (~ +-1). This script fits c_k (a weighted
least-squares fit on the Chebyshev nodes, reweighted towards minimax, error measured on f
itself), rounds them to fp32, evaluates the device's op sequence in float32 (numpy) on a dense
grid and prints the C++ table and the maximal absolute errors that docs/numerics.md states and
tests/unit/runtime/vector_functions_test.cpp checks. Needs numpy.

    /usr/bin/python3 scripts/vector_function_coeffs.py
"""
import math

import numpy as np
from numpy.polynomial import chebyshev as C

F32 = np.float32
FUNCS = {
    # name: (f, L (exact in fp32), degree)
    "tanh": (np.tanh, 5.5, 18),
    "erf": (np.vectorize(math.erf), 3.625, 12),
}


def fit(f, L, n, nodes=400, rounds=60):
    k = np.arange(nodes)
    w = np.cos(np.pi * (k + 0.5) / nodes)
    t = L * np.sqrt((w + 1) / 2)
    V = C.chebvander(w, n) * t[:, None]  # the error is measured on f = t * g
    y = f(t)
    c, *_ = np.linalg.lstsq(V, y, rcond=None)
    wt = np.ones(nodes)
    for _ in range(rounds):  # Lawson's iteration towards the minimax fit
        wt = wt * (np.abs(V @ c - y) + 1e-30)
        wt /= wt.sum()
        sw = np.sqrt(wt)
        c, *_ = np.linalg.lstsq(V * sw[:, None], y * sw, rcond=None)
    return c.astype(F32)


def odd_fn(c, L, x):
    """The device's op sequence (vector_functions.cpp, odd_poly) in float32."""
    t = np.minimum(np.maximum(x.astype(F32), F32(-L)), F32(L))
    s = t * t
    w2 = s * F32(4.0 / (L * L)) + F32(-2.0)
    n = len(c) - 1
    b2 = np.zeros_like(s)
    b1 = np.full_like(s, c[n])
    for k in range(n - 1, 0, -1):
        b2, b1 = b1, (w2 * b1 - b2) + c[k]
    g = ((w2 * b1) * F32(0.5) - b2) + c[0]
    return t * g


def main():
    coef = {name: fit(f, L, n) for name, (f, L, n) in FUNCS.items()}
    x = np.linspace(-16, 16, 1600001)
    x32 = x.astype(F32)
    xd = x32.astype(np.float64)
    erf = np.vectorize(math.erf)
    th = lambda v: odd_fn(coef["tanh"], FUNCS["tanh"][1], v)
    ef = lambda v: odd_fn(coef["erf"], FUNCS["erf"][1], v)
    errs = {
        "tanh": np.abs(th(x32) - np.tanh(xd)),
        "sigmoid": np.abs((F32(0.5) * th(x32 * F32(0.5)) + F32(0.5)) - 1 / (1 + np.exp(-xd))),
        "erf": np.abs(ef(x32) - erf(xd)),
    }
    h = x32 * F32(0.5)
    gelu = h * ef(x32 * F32(1 / math.sqrt(2))) + h
    errs["gelu"] = np.abs(gelu - xd / 2 * (1 + erf(xd / math.sqrt(2)))) / np.maximum(1, np.abs(xd))
    u = (x32 * x32 * x32) * F32(0.044715) + x32
    gt = h * th(u * F32(math.sqrt(2 / math.pi))) + h
    ref = xd / 2 * (1 + np.tanh(math.sqrt(2 / math.pi) * (xd + 0.044715 * xd ** 3)))
    errs["gelu_tanh"] = np.abs(gt - ref) / np.maximum(1, np.abs(xd))
    for name, (f, L, n) in FUNCS.items():
        print(f"// {name}: L = {L}, degree {n} in w")
        print(f"constexpr float k{name.capitalize()}L = {L}f;")
        print(f"constexpr std::array<float, {n + 1}> k{name.capitalize()}Coef = {{")
        print("    " + ", ".join(float(v).hex() + "f" for v in coef[name]) + "};")
    print("// max |device - exact| on [-16, 16] (gelu, gelu_tanh: / max(1, |x|)):")
    for name, e in errs.items():
        print(f"//   {name}: {e.max():.2e}")


if __name__ == "__main__":
    main()
