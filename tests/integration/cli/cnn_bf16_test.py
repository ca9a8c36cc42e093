#!/usr/bin/python3
"""tpuw run --precision bf16 on CNN models (host/tools/tpuw/cmd_run_cnn_bf16.cpp): compile_bf16_cnn +
run_cnn_bf16, the options and report of the int8 CNN path.

    cnn_bf16_test.py TPUW CASE EXAMPLES_DIR
"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tpuw_cli_harness import CliHarness, expect  # noqa: E402

TPUW, CASE, EXAMPLES = sys.argv[1], sys.argv[2], sys.argv[3]
cli = CliHarness(TPUW, "tpuw_cnn_bf16_")
DIGITS = os.path.join(EXAMPLES, "digits")
MODEL = os.path.join(DIGITS, "digits_cnn.onnx")
TEST_X = os.path.join(DIGITS, "test_x.npy")
TEST_Y = os.path.join(DIGITS, "test_y.npy")
FASHION = os.path.join(EXAMPLES, "fashion_mnist")
LAYER_KEYS = {"name", "kind", "shape", "macs", "relu", "cycles", "utilization", "rd_bytes", "wr_bytes", "min_bytes",
              "bytes_vs_min", "mxu_active", "weight_stall", "weight_shift", "dma_wait", "act_busy", "instructions",
              "energy_uj"}


def run_json(model, *args):
    return json.loads(cli.run_ok("run", model, "--precision", "bf16", *args, "-q", "--json"))


def rtl_built():
    rc, _, _ = cli.run("info", "--backend", "rtl", "--json")
    return rc == 0


if CASE == "cnn_bf16_ref":
    # The whole digits test split in bf16 on ref, in batches: the fp32 output equal to the CPU bf16
    # contract (--check), accuracy within 1 point of the float model, softmax outputs within 2% of
    # the float model's, every JSON key.
    x = np.load(TEST_X).reshape(-1, 1, 8, 8)
    xp = cli.save("x.npy", x)
    out = os.path.join(cli.tmp, "y.npy")
    j = run_json(MODEL, "--input", xp, "--labels", TEST_Y, "--backend", "ref", "--check", "--batch", "100",
                 "--output", out)
    expect(j["model_kind"] == "cnn" and j["precision"] == "bf16" and j["batches"] == 4, j)
    acc = j["accuracy"]
    expect(abs(acc["bf16"] - acc["float"]) <= 0.01 and acc["float"] > 0.97, acc)
    chk = j["check"]
    expect(chk["cpu"] == "equal" and chk["float_argmax_agreement"] > 0.99, chk)
    expect(chk["float_max_abs_diff"] <= 0.02 * chk["float_max_abs"], chk)
    layers = j["layers"]
    expect([l["kind"] for l in layers] == ["conv"] * 4 + ["dense"], [l["kind"] for l in layers])
    for l in layers:
        expect(set(l) == LAYER_KEYS, f"layer keys {sorted(l)}")
        expect(l["cycles"] > 0 and 0 < l["utilization"] <= 1 and l["min_bytes"] > 0 and l["energy_uj"] > 0, l)
    expect(j["rd_bytes"] == j["perf"]["rd_bytes"] and j["wr_bytes"] == j["perf"]["wr_bytes"], "bytes")
    y = np.load(out)
    expect(y.shape == (x.shape[0], 10) and np.allclose(y.sum(axis=1), 1.0, atol=1e-5), "softmax output")
elif CASE == "cnn_bf16_rtl_vs_ref":
    # The verilated device gives the ref backend's output bit for bit (digits CNN: Conv, Pad +
    # AveragePool, Gemm; Fashion-MNIST CNN: Conv, MaxPool, a 4x4 kernel), both --check'ed.
    if not rtl_built():
        sys.exit(77)
    cases = ((MODEL, np.load(TEST_X)[:12]), (os.path.join(FASHION, "fashion_cnn.onnx"),
                                            np.load(os.path.join(FASHION, "fashion_test_x.npy"))[:4]))
    for i, (model, x) in enumerate(cases):
        xp = cli.save(f"x{i}.npy", x)
        outs = {}
        for be in ("ref", "rtl"):
            outs[be] = os.path.join(cli.tmp, f"y{i}_{be}.npy")
            cli.run_ok("run", model, "--precision", "bf16", "--input", xp, "--backend", be, "--check", "-q",
                       "--output", outs[be])
        a, b = np.load(outs["ref"]), np.load(outs["rtl"])
        expect(a.tobytes() == b.tobytes(), f"{model}: rtl output differs from ref")
elif CASE == "cnn_bf16_fashion_ref":
    # The Fashion-MNIST CNN (MaxPool, a 4x4 kernel, view + Linear) in bf16 on the 1000 committed
    # test images: within 1 point of the float model, --check equal.
    j = run_json(os.path.join(FASHION, "fashion_cnn.onnx"), "--input", os.path.join(FASHION, "fashion_test_x.npy"),
                 "--labels", os.path.join(FASHION, "fashion_test_y.npy"), "--backend", "ref", "--check")
    acc = j["accuracy"]
    expect(abs(acc["bf16"] - acc["float"]) <= 0.01 and acc["float"] > 0.85, acc)
    expect(j["check"]["cpu"] == "equal", j["check"])
    expect([l["kind"] for l in j["layers"]] == ["conv", "maxpool", "conv", "maxpool", "dense"], j["layers"])
    expect(all(l["cycles"] > 0 and l["rd_bytes"] > 0 for l in j["layers"] if l["kind"] == "maxpool"), j["layers"])
elif CASE == "cnn_bf16_bad_input":
    # Refused before the device opens, exit 2, naming the problem.
    bad = cli.save("bad.npy", np.zeros((3, 1, 7, 8), np.float32))
    rc, so, se = cli.run("run", MODEL, "--precision", "bf16", "--input", bad, "--backend", "ref")
    expect(rc == 2 and "[rows, 1, 8, 8]" in se, f"bad shape: {rc} {se}")
    for extra, needle in ((["--calibrate", TEST_X], "needs no calibration"), (["--strategy", "pipeline"], "a CNN runs data-parallel only")):
        rc, so, se = cli.run("run", MODEL, "--precision", "bf16", "--input", TEST_X, "--backend", "ref", *extra)
        expect(rc == 2 and needle in se, f"{extra}: {rc} {se}")
elif CASE == "cnn_bf16_functions":
    # Activation functions after convolutions (Sigmoid, Tanh, HardSwish; a VECTOR program each,
    # tpuw/runtime/vector_functions.h): --check equal to the CPU bf16 contract, within 2% of the
    # float model's largest output; rtl == ref bit for bit when the rtl backend is built.
    try:
        import onnx
        from onnx import TensorProto, helper, numpy_helper
    except ImportError:
        sys.exit(77)
    rng = np.random.default_rng(1)
    shapes = {"w1": (6, 3, 3, 3), "b1": (6,), "w2": (5, 6, 3, 3), "b2": (5,), "w3": (4, 5, 1, 1), "b3": (4,)}
    inits = [numpy_helper.from_array(rng.normal(0, 0.5, s).astype(np.float32), k) for k, s in shapes.items()]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
             helper.make_node("Sigmoid", ["c1"], ["s1"], name="sig"),
             helper.make_node("Conv", ["s1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], name="conv2"),
             helper.make_node("Tanh", ["c2"], ["t2"], name="tanh"),
             helper.make_node("Conv", ["t2", "w3", "b3"], ["c3"], name="conv3"),
             helper.make_node("HardSwish", ["c3"], ["y"], name="hswish")]
    graph = helper.make_graph(nodes, "functions", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 7, 7])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4, 7, 7])], inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    m.ir_version = 7
    model = os.path.join(cli.tmp, "functions.onnx")
    onnx.save(m, model)
    xp = cli.save("x.npy", rng.normal(0, 1, (5, 3, 7, 7)).astype(np.float32))
    out = os.path.join(cli.tmp, "y_ref.npy")
    j = run_json(model, "--input", xp, "--backend", "ref", "--check", "--output", out)
    chk = j["check"]
    expect(chk["cpu"] == "equal", chk)
    expect(chk["float_max_abs_diff"] <= 0.02 * chk["float_max_abs"], chk)
    expect([l["name"] for l in j["layers"]] == ["conv1 (Conv) + sig (Sigmoid)", "conv2 (Conv) + tanh (Tanh)",
                                                "conv3 (Conv) + hswish (HardSwish)"], j["layers"])
    if rtl_built():
        out_rtl = os.path.join(cli.tmp, "y_rtl.npy")
        cli.run_ok("run", model, "--precision", "bf16", "--input", xp, "--backend", "rtl", "--check", "-q",
                   "--output", out_rtl)
        expect(np.load(out).tobytes() == np.load(out_rtl).tobytes(), "rtl output differs from ref")
elif CASE == "cnn_bf16_blocks":
    # examples/cnn_blocks in bf16 (residual Add and Concat as 1x1 convolutions over the channel
    # concatenation, [I; I] / identity weights): --check equal to the CPU bf16 contract, every output
    # within 2% of the largest |y| of PyTorch's float output; rtl == ref for the residual block.
    blocks = os.path.join(EXAMPLES, "cnn_blocks")
    for name in ("residual", "dwsep", "concat"):
        model = os.path.join(blocks, f"{name}_block.onnx")
        xp = os.path.join(blocks, f"{name}_block_x.npy")
        out = os.path.join(cli.tmp, f"{name}_ref.npy")
        j = run_json(model, "--input", xp, "--backend", "ref", "--check", "--output", out)
        expect(j["check"]["cpu"] == "equal", (name, j["check"]))
        want = np.load(os.path.join(blocks, f"{name}_block_expected.npy")).astype(np.float64)
        got = np.load(out).astype(np.float64).reshape(want.shape)
        err = np.abs(got - want).max()
        expect(err <= 0.02 * np.abs(want).max(), f"{name}: max error {err} of {np.abs(want).max()}")
        if name == "residual":
            expect(any("Add" in l["name"] for l in j["layers"]), [l["name"] for l in j["layers"]])
            if rtl_built():
                out_rtl = os.path.join(cli.tmp, f"{name}_rtl.npy")
                cli.run_ok("run", model, "--precision", "bf16", "--input", xp, "--backend", "rtl", "--check", "-q",
                           "--output", out_rtl)
                expect(np.load(out).tobytes() == np.load(out_rtl).tobytes(), f"{name}: rtl output differs from ref")
else:
    print("unknown case", CASE)
    sys.exit(1)
print("PASS", CASE)
