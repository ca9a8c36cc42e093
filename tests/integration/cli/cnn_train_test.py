#!/usr/bin/python3
"""tpuw train on a CNN (runtime/cnn_trainer.h), driven as a user would: a PyTorch-exported
Conv-Relu-MaxPool-Conv-Relu-AvgPool-Linear-Relu-Linear (tests/unit/training/data/cnn_step/poolnet.onnx,
8x8 inputs) trained on the digits; the loss goes down, the checkpoint names the model's
initializers, the trained file runs with `tpuw run --precision bf16`; rtl == ref byte for byte;
the refused configurations.

    cnn_train_test.py TPUW CASE EXAMPLES_DIR MODEL
"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tpuw_cli_harness import CliHarness, expect  # noqa: E402

TPUW, CASE, EXAMPLES, MODEL = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
cli = CliHarness(TPUW, "tpuw_cnn_train_")
x_all = (np.load(os.path.join(EXAMPLES, "digits", "digits_x.npy")).astype(np.float32) / np.float32(16)).reshape(-1, 1, 8, 8)
y_all = np.load(os.path.join(EXAMPLES, "digits", "digits_y.npy")).astype(np.int64)
X = cli.save("x.npy", x_all[:600])
Y = cli.save("y.npy", y_all[:600])
OUT = os.path.join(cli.tmp, "out.onnx")


def train(backend, *extra):
    return cli.run("train", MODEL, "--input", X, "--labels", Y, "--output", OUT, "--backend", backend, "-q", *extra)


if CASE == "cnn_train_ref":
    ck = os.path.join(cli.tmp, "ck")
    vx = cli.save("vx.npy", x_all[1400:])
    vy = cli.save("vy.npy", y_all[1400:])
    rc, so, se = train("ref", "--batch", "32", "--epochs", "6", "--lr", "0.1", "--momentum", "0.9", "--json",
                       "--validate", vx, "--validate-labels", vy, "--checkpoint", ck)
    expect(rc == 0, f"exit {rc}: {se}")
    j = json.loads(so)
    expect(j["backend"] == "ref" and j["cycles_per_step"] > 0 and 0 < j["utilization"] <= 1, f"{j}")
    losses = [e["loss"] for e in j["epochs"]]
    expect(losses[-1] < 0.9 * losses[0], f"the loss did not go down: {losses}")
    m = json.load(open(os.path.join(ck, "manifest.json")))
    names = sorted(p["name"] for p in m["params"])
    expect(names == ["conv1.bias", "conv1.weight", "conv2.bias", "conv2.weight", "fc1.bias", "fc1.weight",
                     "fc2.bias", "fc2.weight"], f"params {names}")
    # The trained file runs in bf16 with the model's input and output, and its accuracy is the
    # trainer's validation accuracy (the same forward up to the head's program).
    r = json.loads(cli.run_ok("run", OUT, "--input", vx, "--labels", vy, "--precision", "bf16", "--backend", "ref",
                              "-q", "--json"))
    acc = r["accuracy"]["bf16"]
    expect(abs(acc - j["epochs"][-1]["accuracy"]) <= 0.02, f"run {acc} vs train {j['epochs'][-1]}")
elif CASE == "cnn_train_rtl_vs_ref":
    rc, _, _ = cli.run("info", "--backend", "rtl", "--json")
    if rc != 0:
        print("SKIP: rtl backend not built")
        sys.exit(77)
    out = {}
    for b in ("ref", "rtl"):
        rc, so, se = train(b, "--batch", "16", "--max-steps", "3", "--lr", "0.1", "--momentum", "0.9",
                           "--weight-decay", "0.001")
        expect(rc == 0, f"{b}: exit {rc}: {se}")
        out[b] = open(OUT, "rb").read()
    expect(out["ref"] == out["rtl"], "rtl and ref trained different weights")
elif CASE == "cnn_train_refused":
    for args, want in ((("host",), "a CNN trains on one device"),
                       (("ref", "--devices", "2"), "a CNN trains on one device")):
        rc, so, se = train(*args)
        expect(rc == 2 and want in se, f"{args}: exit {rc}: {se}")
else:
    sys.exit(f"unknown case {CASE}")
