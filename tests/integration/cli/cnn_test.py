#!/usr/bin/python3
"""tpuw run on CNN models (host/tools/tpuw/cmd_run_cnn.cpp): examples/digits/digits_cnn.onnx through
compile_quantized_cnn + run_cnn in int8, the same options and outputs as the dense-layer path.

    cnn_test.py TPUW CASE EXAMPLES_DIR
"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tpuw_cli_harness import CliHarness, expect  # noqa: E402

TPUW, CASE, EXAMPLES = sys.argv[1], sys.argv[2], sys.argv[3]
cli = CliHarness(TPUW, "tpuw_cnn_")
DIGITS = os.path.join(EXAMPLES, "digits")
MODEL = os.path.join(DIGITS, "digits_cnn.onnx")
TEST_X = os.path.join(DIGITS, "test_x.npy")
TEST_Y = os.path.join(DIGITS, "test_y.npy")
CALIB = os.path.join(DIGITS, "calib_x.npy")
LAYER_KEYS = {"name", "kind", "shape", "macs", "relu", "cycles", "utilization", "rd_bytes", "wr_bytes", "min_bytes",
              "bytes_vs_min", "mxu_active", "weight_stall", "weight_shift", "dma_wait", "act_busy", "instructions",
              "energy_uj"}


def run_json(*args):
    return json.loads(cli.run_ok("run", MODEL, *args, "-q", "--json"))


def rtl_built():
    rc, _, _ = cli.run("info", "--backend", "rtl", "--json")
    return rc == 0


if CASE == "cnn_run_ref":
    # The whole test split in int8 on ref, images given as [rows, 1, 8, 8]: accuracy within 1 point
    # of the float model, the int32 output equal to the CPU integer model (--check), the logits
    # written, every JSON key.
    x = np.load(TEST_X).reshape(-1, 1, 8, 8)
    xp = cli.save("x.npy", x)
    out = os.path.join(cli.tmp, "y.npy")
    j = run_json("--input", xp, "--labels", TEST_Y, "--calibrate", CALIB, "--backend", "ref", "--check",
                 "--output", out)
    expect(j["model_kind"] == "cnn" and j["precision"] == "int8", j)
    expect(j["rows"] == x.shape[0] and j["input_shape"] == [1, 8, 8] and j["output_features"] == 10, j)
    acc = j["accuracy"]
    expect(acc["rows"] == x.shape[0], acc)
    expect(abs(acc["int8"] - acc["float"]) <= 0.01, f"int8 {acc['int8']} vs float {acc['float']}")
    expect(acc["float"] > 0.97, acc)
    expect(j["check"]["cpu"] == "equal" and j["check"]["float_argmax_agreement"] > 0.98, j["check"])
    layers = j["layers"]
    expect([l["kind"] for l in layers] == ["conv"] * 4 + ["dense"], [l["kind"] for l in layers])
    for l in layers:
        expect(set(l) == LAYER_KEYS, f"layer keys {sorted(l)}")
        expect(l["cycles"] > 0 and 0 < l["utilization"] <= 1 and l["min_bytes"] > 0 and l["energy_uj"] > 0, l)
        expect(l["bytes_vs_min"] == (l["rd_bytes"] + l["wr_bytes"]) / l["min_bytes"], l)
    expect(sum(l["cycles"] for l in layers) == j["cycles"] == j["perf"]["cycles"], "per-layer cycles add up")
    expect(j["rd_bytes"] == j["perf"]["rd_bytes"] and j["wr_bytes"] == j["perf"]["wr_bytes"], "bytes")
    expect(sum(l["rd_bytes"] + l["wr_bytes"] for l in layers) <= j["rd_bytes"] + j["wr_bytes"], "layer bytes")
    expect(sum(l["macs"] for l in layers) == j["macs"], "macs add up")
    expect(j["cycles_per_image"] == j["cycles"] / x.shape[0], j["cycles_per_image"])
    y = np.load(out)
    expect(y.shape == (x.shape[0], 10) and y.dtype == np.float32, y.shape)
    expect(np.allclose(y.sum(axis=1), 1.0, atol=1e-4), "softmax rows")  # the model ends with Softmax
    expect(float(np.mean(y.argmax(axis=1) == np.load(TEST_Y))) == acc["int8"], "output matches the accuracy")
    # Flattened rows [rows, 64] give the same output; batches of 100 give the same output.
    out2 = os.path.join(cli.tmp, "y2.npy")
    run_json("--input", TEST_X, "--calibrate", CALIB, "--backend", "ref", "--batch", "100", "--output", out2)
    expect(np.array_equal(np.load(out2), y), "flattened input in batches of 100 differs")
    # The human report: one line per layer and the accuracy line.
    so = cli.run_ok("run", MODEL, "--input", TEST_X, "--labels", TEST_Y, "--calibrate", CALIB, "--backend", "ref")
    expect("4 convolution/pooling layers + 1 dense layer" in so and "accuracy on" in so and "x min" in so, so)
elif CASE == "cnn_rtl_vs_ref":
    # A few rows on the verilated device: the output bit-identical to ref, cycles equal.
    if not rtl_built():
        sys.exit(77)
    x = np.load(TEST_X)[:12]
    xp = cli.save("x.npy", x)
    outs, js = {}, {}
    for be in ("ref", "rtl"):
        outs[be] = os.path.join(cli.tmp, f"y_{be}.npy")
        js[be] = run_json("--input", xp, "--calibrate", CALIB, "--backend", be, "--check", "--output", outs[be])
    expect(np.array_equal(np.load(outs["ref"]), np.load(outs["rtl"])), "rtl output differs from ref")
    expect(js["rtl"]["check"]["cpu"] == "equal", js["rtl"]["check"])
elif CASE == "cnn_fashion_rtl":
    # The PyTorch-exported Fashion-MNIST CNN (MaxPool with ceil_mode, x.view(x.size(0), -1)): 300
    # images in int8 on ref within 1 point of float; 24 of them on rtl bit-identical to ref.
    fdir = os.path.join(EXAMPLES, "fashion_mnist")
    fmodel = os.path.join(fdir, "fashion_cnn.onnx")
    x = np.load(os.path.join(fdir, "fashion_test_x.npy"))
    y = np.load(os.path.join(fdir, "fashion_test_y.npy"))
    xp, yp = cli.save("x.npy", x[:300]), cli.save("y.npy", y[:300])
    j = json.loads(cli.run_ok("run", fmodel, "--input", xp, "--labels", yp, "--backend", "ref", "--check", "-q",
                              "--json"))
    acc = j["accuracy"]
    expect(abs(acc["int8"] - acc["float"]) <= 0.01 and acc["float"] > 0.85, acc)
    expect([l["kind"] for l in j["layers"]] == ["conv", "maxpool", "conv", "maxpool", "dense"],
           [l["kind"] for l in j["layers"]])
    # The max pools run on the device (VECTOR IMAX, ISA 1.3): cycles and bytes of their own.
    expect(all(l["cycles"] > 0 and l["rd_bytes"] > 0 and l["wr_bytes"] > 0 and l["min_bytes"] > 0
               for l in j["layers"] if l["kind"] == "maxpool"), j["layers"])
    if not rtl_built():
        sys.exit(77)
    xs = cli.save("xs.npy", x[:24])
    outs = {}
    for be in ("ref", "rtl"):
        outs[be] = os.path.join(cli.tmp, f"f_{be}.npy")
        cli.run_ok("run", fmodel, "--input", xs, "--calibrate", xp, "--backend", be, "--check", "-q", "--output",
                   outs[be])
    expect(np.array_equal(np.load(outs["ref"]), np.load(outs["rtl"])), "rtl output differs from ref")
elif CASE == "cnn_bad_input":
    # Refused before the device opens, exit 2, naming the problem.
    bad = cli.save("bad.npy", np.zeros((3, 1, 7, 8), np.float32))
    rc, so, se = cli.run("run", MODEL, "--input", bad, "--backend", "ref")
    expect(rc == 2 and "[rows, 1, 8, 8]" in se, f"bad shape: {rc} {se}")
    for extra, needle in ((["--devices", "2", "--strategy", "pipeline"], "a CNN runs data-parallel only"),
                          (["--trace", cli.tmp], "--trace " + cli.tmp + ": is a directory")):
        rc, so, se = cli.run("run", MODEL, "--input", TEST_X, "--backend", "ref", *extra)
        expect(rc == 2 and needle in se, f"{extra}: {rc} {se}")
    rc, so, se = cli.run("run", MODEL, "--input", TEST_X, "--labels", CALIB, "--backend", "ref")
    expect(rc == 2 and "labels" in se, f"bad labels: {rc} {se}")
elif CASE == "cnn_feature_map":
    # Models that end in a feature map (ONNX's own Conv and GlobalAveragePool node tests): the
    # output .npy has the model's output shape (NCHW), within int8 tolerance of ONNX's expected
    # output, bit-identical to the CPU integer model (--check, no argmax agreement: not class
    # scores); --labels is refused.
    cases = os.path.join(EXAMPLES, "..", "tests", "conformance", "cases")
    for name, shape in (("test_basic_conv_with_padding", (1, 1, 5, 5)), ("test_globalaveragepool", (1, 3, 1, 1))):
        model = os.path.join(cases, name, "model.onnx")
        xin = os.path.join(cases, name, "input.npy")
        want = np.load(os.path.join(cases, name, "expected.npy"))
        out = os.path.join(cli.tmp, name + ".npy")
        j = json.loads(cli.run_ok("run", model, "--input", xin, "--backend", "ref", "--check", "--output", out, "-q",
                                  "--json"))
        y = np.load(out)
        expect(y.shape == shape == want.shape and y.dtype == np.float32, f"{name}: {y.shape} vs {want.shape}")
        expect(j["output_features"] == int(np.prod(shape[1:])) and j["check"]["cpu"] == "equal", j)
        # Not class scores: no argmax agreement (null in the JSON, nothing in the check line).
        expect(j["check"]["float_argmax_agreement"] is None, j["check"])
        so = cli.run_ok("run", model, "--input", xin, "--backend", "ref", "--check")
        expect("check: device output equals" in so and "argmax" not in so, so)
        err = float(np.max(np.abs(y - want)))
        expect(err <= 0.02 * float(np.max(np.abs(want))), f"{name}: max error {err}")
        so = cli.run_ok("run", model, "--input", xin, "--backend", "ref")
        expect("feature map [batch, " in so, so)
        rc, so, se = cli.run("run", model, "--input", xin, "--labels", TEST_Y, "--backend", "ref")
        expect(rc == 2 and "is a feature map" in se, f"--labels: {rc} {se}")
elif CASE == "cnn_blocks":
    # examples/cnn_blocks (PyTorch): a residual block, a depthwise-separable block, a Concat block
    # in int8 on ref (--check bit for bit, within 3% of PyTorch's output, the output in the model's
    # shape); the residual and the Concat block on rtl bit-identical to ref (4 images).
    blocks = os.path.join(EXAMPLES, "cnn_blocks")
    for name in ("residual_block", "dwsep_block", "concat_block"):
        model = os.path.join(blocks, name + ".onnx")
        xin = os.path.join(blocks, name + "_x.npy")
        want = np.load(os.path.join(blocks, name + "_expected.npy"))
        out = os.path.join(cli.tmp, name + ".npy")
        j = json.loads(cli.run_ok("run", model, "--input", xin, "--backend", "ref", "--check", "--output", out, "-q",
                                  "--json"))
        y = np.load(out)
        expect(y.shape == want.shape and j["check"]["cpu"] == "equal", f"{name}: {y.shape} {j.get('check')}")
        err = float(np.max(np.abs(y - want)))
        expect(err <= 0.03 * float(np.max(np.abs(want))), f"{name}: max error {err}")
        if name != "dwsep_block" and rtl_built():
            xs = cli.save(name + "_x4.npy", np.load(xin)[:4])
            ys = {}
            for be in ("ref", "rtl"):
                ys[be] = os.path.join(cli.tmp, f"{name}_{be}.npy")
                cli.run_ok("run", model, "--input", xs, "--calibrate", xin, "--backend", be, "--check", "--output",
                           ys[be], "-q")
            expect(np.array_equal(np.load(ys["ref"]), np.load(ys["rtl"])), f"{name}: rtl output differs from ref")
else:
    print("unknown case", CASE)
    sys.exit(1)
print("PASS", CASE)
