#!/usr/bin/python3
"""Exports ONNX's own single-operator test cases for the operators of issue 13 as small
conformance cases for TPU Worker (tests/conformance/, docs/conformance.md).

Needs Debian's python3-onnx (1.12) and python3-numpy (1.24). For every node test case of
onnx.backend.test.case.node whose graph is one node of a listed operator, whose first input and
first output are float32:
    cases/<name>/model.onnx    the node with its first input as the graph's only input and every
                               other input bound as an initializer (the test's own values); the
                               graph's output is the node's first output (MaxPool: every output,
                               its Indices too)
    cases/<name>/input.npy     the first input
    cases/<name>/expected.npy  the first output (ONNX's reference result)
    cases/<name>/expected.NAME.npy  each further output NAME (MaxPool's Indices, int64)
and cases/index.json: [{name, op, input_shape, output_shape, attributes, constants: [[input
position, shape]], outputs: [names] when there are several}]. The files are committed, so the
test (tests/conformance/run_conformance.py) runs without ONNX.

    scripts/gen_conformance.py [--out tests/conformance/cases]
"""
import argparse
import json
import pathlib
import shutil
import sys

import numpy as np

# numpy 1.24 removed these aliases; onnx 1.12's test-case modules still use them.
for _alias, _type in (("float", float), ("int", int), ("bool", bool), ("object", object)):
    if not hasattr(np, _alias):
        setattr(np, _alias, _type)

import onnx  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402
from onnx.backend.test.case.node import collect_testcases  # noqa: E402

OPS = ("Conv MaxPool AveragePool GlobalAveragePool BatchNormalization Add Mul Div Sub Concat Clip Relu "
       "LeakyRelu Sigmoid Tanh HardSigmoid HardSwish Gelu Erf Flatten Reshape Transpose Squeeze Unsqueeze "
       "Gemm MatMul Softmax LogSoftmax LayerNormalization Pad").split()


def float32(value_info):
    return value_info.type.tensor_type.elem_type == onnx.TensorProto.FLOAT


def export(case, out_dir):
    model = case.model
    g = model.graph
    node = g.node[0]
    inputs, outputs = case.data_sets[0]
    # data_sets follow the graph's inputs (optional inputs left out of the graph have no value).
    graph_inputs = [vi.name for vi in g.input]
    values = dict(zip(graph_inputs, inputs))
    first = graph_inputs[0]
    inits = [numpy_helper.from_array(np.asarray(values[n]), n) for n in graph_inputs[1:]]
    # One graph output, the first; MaxPool keeps its Indices too (checked exactly by the runner).
    outs = list(g.output) if node.op_type == "MaxPool" else [g.output[0]]
    new_graph = helper.make_graph([node], case.name, [g.input[0]], outs, initializer=inits)
    new_model = helper.make_model(new_graph, opset_imports=model.opset_import,
                                  producer_name="tpuw-conformance")
    new_model.ir_version = model.ir_version
    onnx.checker.check_model(new_model)
    d = out_dir / case.name
    d.mkdir(parents=True)
    onnx.save(new_model, str(d / "model.onnx"))
    np.save(d / "input.npy", np.asarray(values[first], dtype=np.float32))
    np.save(d / "expected.npy", np.asarray(outputs[0], dtype=np.float32))
    for vi, value in list(zip(outs, outputs))[1:]:
        np.save(d / f"expected.{vi.name}.npy", np.asarray(value))  # as ONNX gives it (Indices: int64)
    attrs = {}
    for a in node.attribute:
        v = helper.get_attribute_value(a)
        attrs[a.name] = v.decode() if isinstance(v, bytes) else (list(v) if not np.isscalar(v) else v)
    # Where each initializer sits among the node's inputs (position, shape).
    consts = [[list(node.input).index(n), list(np.shape(values[n]))] for n in graph_inputs[1:]]
    entry = {"name": case.name, "op": node.op_type, "input_shape": list(np.shape(values[first])),
             "output_shape": list(np.shape(outputs[0])), "attributes": attrs, "constants": consts}
    if len(outs) > 1:
        entry["outputs"] = [vi.name for vi in outs]
    return entry


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(pathlib.Path(__file__).resolve().parent.parent / "tests/conformance/cases"))
    args = ap.parse_args()
    out_dir = pathlib.Path(args.out)
    if out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True)
    index = []
    for case in sorted(collect_testcases(""), key=lambda c: c.name):  # "" = every operator
        g = case.model.graph
        if case.kind != "node" or len(g.node) != 1 or g.node[0].op_type not in OPS:
            continue
        if not g.input or not float32(g.input[0]) or not float32(g.output[0]):
            continue
        index.append(export(case, out_dir))
    (out_dir / "index.json").write_text(json.dumps(index, indent=1) + "\n")
    print(f"{len(index)} cases for {len({c['op'] for c in index})} operators in {out_dir}", file=sys.stderr)


if __name__ == "__main__":
    main()
