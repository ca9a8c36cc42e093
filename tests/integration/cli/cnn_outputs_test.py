#!/usr/bin/python3
"""tpuw run on CNNs with several outputs and with activation functions after the convolutions
(host/tools/tpuw/cmd_run_cnn.cpp): examples/cnn_blocks/two_outputs.onnx writes out.mid.npy (a hidden
layer's map) and out.y.npy, each within int8 tolerance of PyTorch, --check holds both bit for bit,
--json lists them; rtl == ref on both files (skipped without rtl).

    cnn_outputs_test.py TPUW CASE EXAMPLES_DIR
"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tpuw_cli_harness import CliHarness, expect  # noqa: E402

TPUW, CASE, EXAMPLES = sys.argv[1], sys.argv[2], sys.argv[3]
cli = CliHarness(TPUW, "tpuw_cnn_outputs_")
DIR = os.path.join(EXAMPLES, "cnn_blocks")
MODEL = os.path.join(DIR, "two_outputs.onnx")
X = os.path.join(DIR, "two_outputs_x.npy")


def run(backend, rows):
    x = cli.save(f"x_{backend}.npy", np.load(X)[:rows])
    out = os.path.join(cli.tmp, f"out_{backend}.npy")
    j = json.loads(cli.run_ok("run", MODEL, "-i", x, "-o", out, "--check", "--backend", backend, "-q", "--json"))
    return j, out


if CASE == "cnn_outputs_ref":
    j, out = run("ref", 32)
    names = [o["name"] for o in j["outputs"]]
    expect(names == ["mid", "y"], f"outputs {names}")
    expect(j["output"] is None, "several outputs: no single output file")
    for name, want_file in (("mid", "two_outputs_mid.npy"), ("y", "two_outputs_expected.npy")):
        path = out[:-4] + f".{name}.npy"
        expect(os.path.exists(path), f"{path} not written")
        got, want = np.load(path), np.load(os.path.join(DIR, want_file))
        expect(got.shape == want.shape, f"{name}: shape {got.shape} vs {want.shape}")
        err = float(np.abs(got - want).max() / np.abs(want).max())
        expect(err < 0.03, f"{name}: int8 error {err:.4f} of max |y|")
        print(f"{name}: {list(got.shape)}, int8 error {err:.4f} of max |y|")
    # The human report names every output and its file.
    human = cli.run_ok("run", MODEL, "-i", cli.save("x4.npy", np.load(X)[:4]), "-o", os.path.join(cli.tmp, "h.npy"),
                       "--backend", "ref")
    expect("output 'mid' (layer" in human and "-> " in human, human)
elif CASE == "cnn_outputs_rtl_vs_ref":
    rc, _, _ = cli.run("info", "--backend", "rtl", "--json")
    if rc != 0:
        print("rtl backend not built")
        sys.exit(77)
    _, a = run("ref", 4)
    _, b = run("rtl", 4)
    for name in ("mid", "y"):
        ra, rb = np.load(a[:-4] + f".{name}.npy"), np.load(b[:-4] + f".{name}.npy")
        expect(np.array_equal(ra, rb), f"{name}: rtl differs from ref")
else:
    print(f"unknown case {CASE}")
    sys.exit(1)
