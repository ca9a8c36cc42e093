#!/usr/bin/python3
"""Writes multi_output.onnx (needs Debian's python3-onnx; the file is committed, the tests need only
NumPy): x [batch, 6] -> Gemm -> 'logits' [batch, 4], and the host operators after it as two more
graph outputs, 'probs' = Softmax(logits) and 'head/logp' = LogSoftmax(logits) (a name with a '/',
which tpuw run's --output file name turns into '_')."""
import os

import numpy as np
from onnx import TensorProto, checker, helper, numpy_helper, save

rng = np.random.default_rng(13)
w = rng.uniform(-1, 1, (6, 4)).astype(np.float32)
b = rng.uniform(-0.5, 0.5, 4).astype(np.float32)
nodes = [
    helper.make_node("Gemm", ["x", "w", "b"], ["logits"], name="fc"),
    helper.make_node("Softmax", ["logits"], ["probs"], name="sm", axis=1),
    helper.make_node("LogSoftmax", ["logits"], ["head/logp"], name="lsm", axis=1),
]
graph = helper.make_graph(
    nodes, "multi_output", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 6])],
    [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["batch", 4]) for n in ("logits", "probs", "head/logp")],
    [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], producer_name="tpuw tests")
model.ir_version = 8
checker.check_model(model)
save(model, os.path.join(os.path.dirname(os.path.abspath(__file__)), "multi_output.onnx"))

# two_heads.onnx: x [batch, 6] -> Gemm + Relu -> 't' [batch, 5]; two heads on it, 'cls' =
# Softmax(Gemm(t)) [batch, 3] and 'box' = Gemm(t) [batch, 4] (one device layer of 7 columns).
w0 = rng.uniform(-1, 1, (6, 5)).astype(np.float32)
wc = rng.uniform(-1, 1, (5, 3)).astype(np.float32)
wb = rng.uniform(-1, 1, (5, 4)).astype(np.float32)
bc = rng.uniform(-0.5, 0.5, 3).astype(np.float32)
bb = rng.uniform(-0.5, 0.5, 4).astype(np.float32)
nodes = [
    helper.make_node("MatMul", ["x", "w0"], ["h"], name="trunk"),
    helper.make_node("Relu", ["h"], ["t"], name="relu"),
    helper.make_node("Gemm", ["t", "wc", "bc"], ["cls_logits"], name="cls_head"),
    helper.make_node("Softmax", ["cls_logits"], ["cls"], name="cls_softmax", axis=1),
    helper.make_node("Gemm", ["t", "wb", "bb"], ["box"], name="box_head"),
]
graph = helper.make_graph(
    nodes, "two_heads", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 6])],
    [helper.make_tensor_value_info("cls", TensorProto.FLOAT, ["batch", 3]),
     helper.make_tensor_value_info("box", TensorProto.FLOAT, ["batch", 4])],
    [numpy_helper.from_array(a, n) for a, n in ((w0, "w0"), (wc, "wc"), (bc, "bc"), (wb, "wb"), (bb, "bb"))])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], producer_name="tpuw tests")
model.ir_version = 8
checker.check_model(model)
save(model, os.path.join(os.path.dirname(os.path.abspath(__file__)), "two_heads.onnx"))
