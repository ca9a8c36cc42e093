#!/usr/bin/python3
"""Exports ONNX's own single-operator test cases for the operators of issues 13 and 25 as small
conformance cases for TPU Worker (tests/conformance/, docs/conformance.md).

Needs Debian's python3-onnx (1.12) and python3-numpy (1.24). For every node test case of
onnx.backend.test.case.node whose graph is one node of a listed operator, that has a float32
input (the model's input: the node's first float32 input, e.g. Where's X, not its condition) and
whose first output is float32 (Cast: any type, the type is the operator's point):
    cases/<name>/model.onnx    the node with that input as the graph's only input and every
                               other input bound as an initializer (the test's own values, of
                               their own types: Gather's indices, Where's condition, Slice's
                               starts/ends, Split's sizes, Expand's and Reshape's shapes); the
                               graph's output is the node's first output (MaxPool and Split:
                               every output)
    cases/<name>/input.npy     the model's input
    cases/<name>/expected.npy  the first output (ONNX's reference result; a bfloat16 output is
                               stored as the float32 values of its bits, a string output as a
                               NumPy unicode array)
    cases/<name>/expected.NAME.npy  each further output NAME (MaxPool's int64 Indices, Split's parts)
and cases/index.json: [{name, op, input_position, input_shape, output_shape, output_dtype,
attributes, constants: [[input position, shape, dtype]], outputs: [names] when there are
several}]. The files are committed, so the test (tests/conformance/run_conformance.py) runs
without ONNX.

onnx 1.12 names two ReduceSum cases test_reduce_sum_negative_axes_keepdims_random (the second,
axes [] with noop_with_empty_axes=1, is the "empty axes input noop" random case); a repeated name
gets "_2" appended so that both are kept.

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

# The operators of issue 13 (the CNN issue), then those issue 25 adds.
OPS = ("Conv MaxPool AveragePool GlobalAveragePool BatchNormalization Add Mul Div Sub Concat Clip Relu "
       "LeakyRelu Sigmoid Tanh HardSigmoid HardSwish Gelu Erf Flatten Reshape Transpose Squeeze Unsqueeze "
       "Gemm MatMul Softmax LogSoftmax LayerNormalization Pad "
       "Split Slice Gather Where Cast Expand ReduceMean ReduceSum Pow Sqrt").split()
# Operators whose further outputs are kept (and checked) too.
ALL_OUTPUTS = ("MaxPool", "Split")


def float32(value_info):
    return value_info.type.tensor_type.elem_type == onnx.TensorProto.FLOAT


def elem_type(value_info):
    return onnx.TensorProto.DataType.Name(value_info.type.tensor_type.elem_type).lower()


def model_input(g):
    """Index of the graph input that becomes the model's input (the first float32 one the node
    reads), or None."""
    read = set(g.node[0].input)
    return next((i for i, vi in enumerate(g.input) if float32(vi) and vi.name in read), None)


def expected_array(vi, value):
    """ONNX's reference output as stored: bfloat16 (uint16 bits in onnx 1.12) as its float32
    values, strings as a unicode array (np.save without pickles), anything else as given."""
    t = vi.type.tensor_type.elem_type
    if t == onnx.TensorProto.BFLOAT16:
        bits = np.asarray(value).astype(np.uint32) << 16
        return bits.view(np.float32)
    if t == onnx.TensorProto.STRING:
        return np.asarray(value).astype(str)
    if t == onnx.TensorProto.FLOAT:
        return np.asarray(value, dtype=np.float32)
    return np.asarray(value)


def export(case, name, out_dir):
    model = case.model
    g = model.graph
    node = g.node[0]
    inputs, outputs = case.data_sets[0]
    # data_sets follow the graph's inputs (optional inputs left out of the graph have no value).
    graph_inputs = [vi.name for vi in g.input]
    values = dict(zip(graph_inputs, inputs))
    k = model_input(g)
    first = graph_inputs[k]
    # The node's other inputs (a graph input the node does not read, CastLike's 'like' in the
    # expanded CastLike cases, is left out).
    others = [n for n in graph_inputs if n != first and n in node.input]
    inits = [numpy_helper.from_array(np.asarray(values[n]), n) for n in others]
    # One graph output, the first; MaxPool keeps its Indices (checked exactly by the runner),
    # Split every part.
    outs = list(g.output) if node.op_type in ALL_OUTPUTS else [g.output[0]]
    new_graph = helper.make_graph([node], name, [g.input[k]], outs, initializer=inits)
    new_model = helper.make_model(new_graph, opset_imports=model.opset_import,
                                  producer_name="tpuw-conformance")
    new_model.ir_version = model.ir_version
    onnx.checker.check_model(new_model)
    d = out_dir / name
    d.mkdir(parents=True)
    onnx.save(new_model, str(d / "model.onnx"))
    np.save(d / "input.npy", np.asarray(values[first], dtype=np.float32))
    np.save(d / "expected.npy", expected_array(outs[0], outputs[0]))
    for vi, value in list(zip(outs, outputs))[1:]:
        np.save(d / f"expected.{vi.name}.npy", expected_array(vi, value))  # Indices: int64
    attrs = {}
    for a in node.attribute:
        v = helper.get_attribute_value(a)
        attrs[a.name] = v.decode() if isinstance(v, bytes) else (list(v) if not np.isscalar(v) else v)
    # Where each initializer sits among the node's inputs (position, shape, element type).
    consts = [[list(node.input).index(n), list(np.shape(values[n])), elem_type(g.input[graph_inputs.index(n)])]
              for n in others]
    entry = {"name": name, "op": node.op_type, "input_position": list(node.input).index(first),
             "input_shape": list(np.shape(values[first])), "output_shape": list(np.shape(outputs[0])),
             "output_dtype": elem_type(outs[0]), "attributes": attrs, "constants": consts}
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
    names = set()
    for case in sorted(collect_testcases(""), key=lambda c: c.name):  # "" = every operator
        g = case.model.graph
        if case.kind != "node" or len(g.node) != 1 or g.node[0].op_type not in OPS:
            continue
        if model_input(g) is None or not (float32(g.output[0]) or g.node[0].op_type == "Cast"):
            continue
        name = case.name
        while name in names:  # onnx 1.12 names two ReduceSum cases alike
            name += "_2"
        names.add(name)
        index.append(export(case, name, out_dir))
    (out_dir / "index.json").write_text(json.dumps(index, indent=1) + "\n")
    print(f"{len(index)} cases for {len({c['op'] for c in index})} operators in {out_dir}", file=sys.stderr)


if __name__ == "__main__":
    main()
