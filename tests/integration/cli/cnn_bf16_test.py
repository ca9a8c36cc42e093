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
              "bytes_vs_min", "mxu_active", "weight_stall", "weight_shift", "dma_wait", "act_busy", "instructions"}


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
        expect(l["cycles"] > 0 and 0 < l["utilization"] <= 1 and l["min_bytes"] > 0, l)
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
    for extra, needle in ((["--calibrate", TEST_X], "needs no calibration"), (["--devices", "2"], "one device")):
        rc, so, se = cli.run("run", MODEL, "--precision", "bf16", "--input", TEST_X, "--backend", "ref", *extra)
        expect(rc == 2 and needle in se, f"{extra}: {rc} {se}")
else:
    print("unknown case", CASE)
    sys.exit(1)
print("PASS", CASE)
