"""Small ONNX models the CNN CLI tests build on the fly (cnn_devices_test.py, cnn_mpirun_test.py);
onnx from Debian's python3-onnx, imported only when a test asks for a model."""
import os

import numpy as np


def indices_model(cli):
    """Conv -> MaxPool with its Indices as a second graph output -> Flatten -> Gemm."""
    import onnx
    from onnx import helper, TensorProto, numpy_helper
    rng = np.random.default_rng(3)
    inits = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32) * 0.3, n)
             for n, s in (("cw", (4, 1, 3, 3)), ("fw", (5, 4 * 5 * 5)))]
    g = helper.make_graph(
        [helper.make_node("Conv", ["x", "cw"], ["c"], "conv", pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["r"], "relu"),
         helper.make_node("MaxPool", ["r"], ["p", "idx"], "pool", kernel_shape=[2, 2], strides=[2, 2]),
         helper.make_node("Flatten", ["p"], ["f"], "flat"),
         helper.make_node("Gemm", ["f", "fw"], ["y"], "fc", transB=1)],
        "pool_indices",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 1, 10, 10])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 5]),
         helper.make_tensor_value_info("idx", TensorProto.INT64, ["batch", 4, 5, 5])],
        inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    path = os.path.join(cli.tmp, "pool_indices.onnx")
    onnx.save(m, path)
    x = cli.save("pool_indices_x.npy", rng.standard_normal((37, 1, 10, 10)).astype(np.float32))
    return path, x
