#!/usr/bin/python3
"""`tpuw run --precision bf16` refuses what int8 refuses (issue 29: bf16 trusted non-finite models;
a NaN weight ran, every output was NaN and --check passed, exit 0). Models are built here with
examples/fashion_mnist/make_mlp.py's hand-written protobuf (no onnx package): x [batch, 4] ->
Gemm(transB=1, alpha, beta) -> Relu -> Gemm -> y [batch, 3].

    bf16_finite_test.py TPUW CASE EXAMPLES_DIR

CASE weights: a NaN weight (the issue's example), +inf and -inf weights: exit 2 in int8 and bf16,
    the same message naming the layer, the tensor and the element.
CASE biases: NaN, +inf and -inf biases, likewise.
CASE large: alpha = 3e38 and beta = 3e38 (folded into the weight and the bias they become
    infinite), and finite 3e38 weights whose products overflow fp32 in bf16: exit 2.
CASE inputs: inputs that round to inf in bf16 (3.4e38, -3.4e38) and inputs inside the bf16 range
    whose products overflow (3e38): exit 2 in bf16 naming the row and the feature or the output.
Nothing is written (--output) in any of them; a finite model still runs (exit 0, --check equal).
"""
import importlib.util
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tpuw_cli_harness import CliHarness, expect  # noqa: E402

TPUW, CASE, EXAMPLES = sys.argv[1], sys.argv[2], sys.argv[3]
cli = CliHarness(TPUW, "tpuw_bf16_finite_")
spec = importlib.util.spec_from_file_location("make_mlp", os.path.join(EXAMPLES, "fashion_mnist", "make_mlp.py"))
mk = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mk)


def float_attr(name, v):  # AttributeProto: name 1, f 2 (fixed32), type 20 (FLOAT = 1)
    return mk.field_bytes(5, mk.field_bytes(1, name) + bytes([0x15]) + struct.pack("<f", v) + mk.field_varint(20, 1))


def model(name, w1=None, b1=None, alpha=None, beta=None):
    rng = np.random.RandomState(4)
    w1 = rng.uniform(-0.5, 0.5, (5, 4)).astype(np.float32) if w1 is None else w1
    b1 = rng.uniform(-0.5, 0.5, (5,)).astype(np.float32) if b1 is None else b1
    w2 = rng.uniform(-0.5, 0.5, (3, 5)).astype(np.float32)
    b2 = rng.uniform(-0.5, 0.5, (3,)).astype(np.float32)
    attrs = mk.int_attr("transB", 1)
    if alpha is not None:
        attrs += float_attr("alpha", alpha)
    if beta is not None:
        attrs += float_attr("beta", beta)
    nodes = [mk.node("Gemm", ["x", "fc1.weight", "fc1.bias"], ["h"], "fc1", attrs),
             mk.node("Relu", ["h"], ["r"], "relu1"),
             mk.node("Gemm", ["r", "fc2.weight", "fc2.bias"], ["y"], "fc2", mk.int_attr("transB", 1))]
    inits = [mk.tensor("fc1.weight", w1), mk.tensor("fc1.bias", b1), mk.tensor("fc2.weight", w2),
             mk.tensor("fc2.bias", b2)]
    graph = b"".join(mk.field_bytes(1, n) for n in nodes) + mk.field_bytes(2, "g") + \
        b"".join(mk.field_bytes(5, t) for t in inits) + mk.field_bytes(11, mk.value_info("x", ["batch", 4])) + \
        mk.field_bytes(12, mk.value_info("y", ["batch", 3]))
    data = mk.field_varint(1, 8) + mk.field_bytes(2, "bf16_finite_test") + mk.field_bytes(7, graph) + \
        mk.field_bytes(8, mk.field_bytes(1, "") + mk.field_varint(2, 13))
    return cli.write(name, data)


X = cli.save("x.npy", np.random.RandomState(5).uniform(0, 1, (6, 4)).astype(np.float32))
OUT = os.path.join(cli.tmp, "y.npy")


def run(m, precision, x=X):
    if os.path.exists(OUT):
        os.remove(OUT)
    rc, so, se = cli.run("run", m, "--input", x, "--backend", "ref", "-q", "--precision", precision, "--check",
                         "--output", OUT)
    expect(rc != 0 or os.path.exists(OUT), f"{m} {precision}: exit 0 without output")
    if rc != 0:
        expect(not os.path.exists(OUT), f"{m} {precision}: exit {rc} and {OUT} written")
    return rc, se


def refused_like_int8(m, want):
    """int8 and bf16 both exit 2; bf16's message is int8's with the bf16 compiler as the reader."""
    rc8, se8 = run(m, "int8")
    rcb, seb = run(m, "bf16")
    expect(rc8 == 2 and want in se8, f"{m} int8: exit {rc8}, expected 2 with '{want}': {se8}")
    expect(rcb == 2 and want in seb, f"{m} bf16: exit {rcb}, expected 2 with '{want}': {seb}")
    expect(se8.replace("the int8 quantizer", "the bf16 compiler") == seb, f"messages differ:\n{se8}\n{seb}")


def refused_bf16(m, want, x=X):
    rc, se = run(m, "bf16", x)
    expect(rc == 2 and want in se, f"{m} bf16: exit {rc}, expected 2 with '{want}': {se}")


good = model("good.onnx")
rc, se = run(good, "bf16")
expect(rc == 0, f"a finite model in bf16: exit {rc}: {se}")

if CASE == "weights":
    for v, shown in ((np.nan, "NaN"), (np.inf, "+inf"), (-np.inf, "-inf")):
        w = np.random.RandomState(4).uniform(-0.5, 0.5, (5, 4)).astype(np.float32)
        w[2, 1] = v  # [out, in] as PyTorch stores it: element [1, 2] of [inputs, outputs]
        refused_like_int8(model(f"w_{shown}.onnx", w1=w),
                          f"layer 'fc1 (Gemm) + relu1 (Relu)' weight 'layer0.w' (as [inputs, outputs]) element [1, 2] is {shown} "
                          f"(every value")

elif CASE == "biases":
    for v, shown in ((np.nan, "NaN"), (np.inf, "+inf"), (-np.inf, "-inf")):
        b = np.zeros(5, np.float32)
        b[3] = v
        refused_like_int8(model(f"b_{shown}.onnx", b1=b), f"layer 'fc1 (Gemm) + relu1 (Relu)' bias 'layer0.b' element [0, 3] is {shown} (every value")

elif CASE == "large":
    # alpha x a weight of 2 and beta x a bias of 2 are infinite in float32: refused as int8 refuses them.
    two = np.full((5, 4), 2.0, np.float32)
    refused_like_int8(model("alpha.onnx", w1=two, alpha=3e38),
                      "weight 'layer0.w' (as [inputs, outputs]) element [0, 0] is +inf")
    refused_like_int8(model("beta.onnx", b1=np.full(5, -2.0, np.float32), beta=3e38),
                      "bias 'layer0.b' element [0, 0] is -inf")

    big = np.full((5, 4), 3e38, np.float32)
    refused_bf16(model("big.onnx", w1=big), "overflow the fp32 range")
    rc8, se8 = run(model("big.onnx", w1=big), "int8")
    expect(rc8 != 0, f"int8 with 3e38 weights: exit {rc8}: {se8}")

elif CASE == "inputs":
    for v in (3.4e38, -3.4e38):
        x = np.random.RandomState(5).uniform(0, 1, (6, 4)).astype(np.float32)
        x[4, 2] = v
        xp = cli.save("xbig.npy", x)
        refused_bf16(good, f"{xp}: row 4 feature 2 is {'-' if v < 0 else ''}3.4e+38, beyond the largest bf16", xp)
    x = np.random.RandomState(5).uniform(0, 1, (6, 4)).astype(np.float32)
    x[1, :] = 3e38  # inside the bf16 range; the products are not
    refused_bf16(good, "overflow the fp32 range", cli.save("xnear.npy", x))

else:
    sys.exit(f"unknown case {CASE}")
print("ok")
