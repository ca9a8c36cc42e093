#!/usr/bin/python3
"""An untrained MLP as ONNX, laid out as PyTorch exports nn.Linear, with only NumPy.

Needs only python3-numpy (system Python, hence the shebang): the few protobuf messages of the file
are written by hand below, so no ONNX or PyTorch package is needed to make the example's model.

    ./make_mlp.py OUT.onnx [--sizes 784,256,10] [--seed 0]

The graph: input "x" [batch, sizes[0]] -> Gemm(transB=1) "fc1" -> Relu -> ... -> Gemm "fcL" ->
output "logits" [batch, sizes[-1]]; initializers fc<i>.weight [out, in] and fc<i>.bias [out]
(float32, raw data), drawn like PyTorch's nn.Linear default: U(-1/sqrt(in), 1/sqrt(in)) for both,
from NumPy's RandomState(seed). opset 13. torch_reference.py loads these weights into PyTorch to
train from the same start.
"""
import argparse
import pathlib

import numpy as np


def varint(n):
    out = bytearray()
    n &= (1 << 64) - 1
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def field_varint(num, v):
    return varint(num << 3) + varint(v)


def field_bytes(num, data):
    if isinstance(data, str):
        data = data.encode()
    return varint((num << 3) | 2) + varint(len(data)) + data


def tensor(name, arr):  # TensorProto: dims 1, data_type 2 (FLOAT = 1), name 8, raw_data 9
    arr = np.ascontiguousarray(arr, dtype="<f4")
    return b"".join(field_varint(1, d) for d in arr.shape) + field_varint(2, 1) + field_bytes(8, name) + \
        field_bytes(9, arr.tobytes())


def value_info(name, dims):  # ValueInfoProto{name 1, type 2: TypeProto{tensor_type 1: {elem_type 1, shape 2}}}
    shape = b"".join(field_bytes(1, field_bytes(2, d) if isinstance(d, str) else field_varint(1, d)) for d in dims)
    return field_bytes(1, name) + field_bytes(2, field_bytes(1, field_varint(1, 1) + field_bytes(2, shape)))


def node(op, inputs, outputs, name, attrs=b""):  # NodeProto: input 1, output 2, name 3, op_type 4, attribute 5
    return b"".join(field_bytes(1, i) for i in inputs) + b"".join(field_bytes(2, o) for o in outputs) + \
        field_bytes(3, name) + field_bytes(4, op) + attrs


def int_attr(name, v):  # AttributeProto: name 1, i 3, type 20 (INT = 2)
    return field_bytes(5, field_bytes(1, name) + field_varint(3, v) + field_varint(20, 2))


def mlp(sizes, seed):
    rng = np.random.RandomState(seed)
    nodes, inits = [], []
    act = "x"
    for i in range(len(sizes) - 1):
        fan_in, fan_out = sizes[i], sizes[i + 1]
        bound = 1.0 / np.sqrt(fan_in)
        w = rng.uniform(-bound, bound, size=(fan_out, fan_in)).astype(np.float32)
        b = rng.uniform(-bound, bound, size=(fan_out,)).astype(np.float32)
        inits += [tensor(f"fc{i + 1}.weight", w), tensor(f"fc{i + 1}.bias", b)]
        last = i + 2 == len(sizes)
        out = "logits" if last else f"/fc{i + 1}/Gemm_output_0"
        nodes.append(node("Gemm", [act, f"fc{i + 1}.weight", f"fc{i + 1}.bias"], [out], f"/fc{i + 1}/Gemm",
                          int_attr("transB", 1)))
        act = out
        if not last:
            nodes.append(node("Relu", [act], [f"/relu{i + 1}/Relu_output_0"], f"/relu{i + 1}/Relu"))
            act = f"/relu{i + 1}/Relu_output_0"
    graph = b"".join(field_bytes(1, n) for n in nodes) + field_bytes(2, "mlp") + \
        b"".join(field_bytes(5, t) for t in inits) + field_bytes(11, value_info("x", ["batch", sizes[0]])) + \
        field_bytes(12, value_info("logits", ["batch", sizes[-1]]))
    # ModelProto: ir_version 1, producer_name 2, graph 7, opset_import 8 {domain 1, version 2}
    return field_varint(1, 8) + field_bytes(2, "tpuw make_mlp.py") + field_bytes(7, graph) + \
        field_bytes(8, field_bytes(1, "") + field_varint(2, 13))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=pathlib.Path)
    ap.add_argument("--sizes", default="784,256,10")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    sizes = [int(s) for s in a.sizes.split(",")]
    if len(sizes) < 2 or min(sizes) < 1:
        ap.error("--sizes needs at least two positive sizes")
    a.out.write_bytes(mlp(sizes, a.seed))
    print(f"{a.out}: MLP {'-'.join(map(str, sizes))}, seed {a.seed}")


if __name__ == "__main__":
    main()
