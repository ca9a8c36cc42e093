#!/usr/bin/python3
"""tpuw run on models with several graph inputs (examples/multi_input, docs/network_compiler.md
"Several graph inputs"): --input NAME=FILE per input, int8 and bf16 against PyTorch, rtl == ref,
--devices 2 and mpirun byte-identical to one device, the refused cases (exit 2).

    multi_input_test.py TPUW CASE EXAMPLES_DIR
"""
import filecmp
import json
import os
import shutil
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tpuw_cli_harness import CliHarness, expect, mpi_env  # noqa: E402

TPUW, CASE, EXAMPLES = sys.argv[1], sys.argv[2], sys.argv[3]
cli = CliHarness(TPUW, "tpuw_multi_input_")
DIR = os.path.join(EXAMPLES, "multi_input")
MODELS = ("concat_mlp", "add_branches")
FEATURES = {"concat_mlp": {"a": 6, "b": 10}, "add_branches": {"a": 8, "b": 12}}


def model(name):
    return os.path.join(DIR, name + ".onnx")


def inputs(name, flag="--input"):
    args = []
    for n in ("a", "b"):
        args += [flag, f"{n}={os.path.join(DIR, f'{name}_{n}.npy')}"]
    return args


def rtl_built():
    rc, _, _ = cli.run("info", "--backend", "rtl", "--json")
    return rc == 0


def out(name):
    return os.path.join(cli.tmp, name)


if CASE == "multi_input_ref":
    # Both models in int8 and bf16 on ref: --check equal to the CPU model, within the cnn_blocks
    # tolerances of PyTorch's output (int8 3 %, bf16 2 % of max |y|), every input named with its
    # file and bytes in --json; each input has its own int8 scale (add_branches: b is 100x a).
    for name in MODELS:
        want = np.load(os.path.join(DIR, name + "_expected.npy"))
        for prec, tol, size in (("int8", 0.03, 1), ("bf16", 0.02, 2)):
            y = out(f"{name}_{prec}.npy")
            j = json.loads(cli.run_ok("run", model(name), *inputs(name), "--precision", prec, "--backend", "ref",
                                      "--check", "--output", y, "-q", "--json"))
            got = np.load(y)
            expect(got.shape == want.shape, f"{name} {prec}: shape {got.shape}")
            err = float(np.max(np.abs(got - want)))
            expect(err <= tol * float(np.max(np.abs(want))), f"{name} {prec}: max error {err}")
            expect(j["check"]["cpu"] == "equal", f"{name} {prec}: {j['check']}")
            expect([i["name"] for i in j["inputs"]] == ["a", "b"], j["inputs"])
            for i in j["inputs"]:
                f = FEATURES[name][i["name"]]
                expect(i["features"] == f and i["bytes"] == 64 * f * size and i["file"].endswith(f"_{i['name']}.npy"),
                       i)
            expect(j["input_features"] == sum(FEATURES[name].values()), j["input_features"])
            if prec == "int8":
                s = [i["scale"] for i in j["inputs"]]
                if name == "add_branches":
                    expect(80 < s[1] / s[0] < 125, f"scales {s}")
            else:
                expect("scale" not in j["inputs"][0], j["inputs"])
    # The human-readable report names every input, its file and bytes; the inputs in another order
    # on the command line give the same bytes.
    so = cli.run_ok("run", model("add_branches"), *inputs("add_branches"), "--backend", "ref", "-q")
    expect("2 graph inputs" in so and "'a' [batch, 8] from" in so and "(512 bytes)" in so and
           "input scales 'a' " in so, so)
    ab, ba = out("ab.npy"), out("ba.npy")
    cli.run_ok("run", model("concat_mlp"), *inputs("concat_mlp"), "--backend", "ref", "-q", "--output", ab)
    rev = inputs("concat_mlp")
    cli.run_ok("run", model("concat_mlp"), *rev[2:], *rev[:2], "--backend", "ref", "-q", "--output", ba)
    expect(filecmp.cmp(ab, ba, shallow=False), "input order on the command line changed the output")
    # --calibrate NAME=FILE per input: calibrating on the inputs themselves is the default.
    cal = out("cal.npy")
    cli.run_ok("run", model("concat_mlp"), *inputs("concat_mlp"), *inputs("concat_mlp", "--calibrate"),
               "--backend", "ref", "-q", "--output", cal)
    expect(filecmp.cmp(ab, cal, shallow=False), "--calibrate with the inputs differs from the default")
elif CASE == "multi_input_rtl_vs_ref":
    # The verilated device gives ref's output bit for bit, both --check'ed, int8 and bf16.
    if not rtl_built():
        sys.exit(77)
    for name in MODELS:
        for prec in ("int8", "bf16"):
            ys = {}
            for be in ("ref", "rtl"):
                ys[be] = out(f"{name}_{prec}_{be}.npy")
                cli.run_ok("run", model(name), *inputs(name), "--precision", prec, "--backend", be, "--check", "-q",
                           "--output", ys[be])
            expect(filecmp.cmp(ys["ref"], ys["rtl"], shallow=False), f"{name} {prec}: rtl output differs from ref")
elif CASE == "multi_input_devices":
    # Rows sharded over 2 devices (and 2 MPI ranks when mpirun is there) split every input by the
    # same rows: byte-identical to one device.
    for name in MODELS:
        one, two = out(f"{name}_1.npy"), out(f"{name}_2.npy")
        cli.run_ok("run", model(name), *inputs(name), "--backend", "ref", "-q", "--output", one)
        cli.run_ok("run", model(name), *inputs(name), "--backend", "ref", "-q", "--devices", "2", "--batch", "16",
                   "--output", two)
        expect(filecmp.cmp(one, two, shallow=False), f"{name}: --devices 2 differs from one device")
        b = out(f"{name}_b.npy")
        cli.run_ok("run", model(name), *inputs(name), "--backend", "ref", "-q", "--batch", "24", "--output", b)
        expect(filecmp.cmp(one, b, shallow=False), f"{name}: --batch 24 differs from one batch")
        mpirun = shutil.which("mpirun")
        if mpirun is not None:
            m = out(f"{name}_mpi.npy")
            p = subprocess.run([mpirun, "-np", "2", "--oversubscribe", TPUW, "run", model(name), *inputs(name),
                                "--backend", "ref", "-q", "--output", m], capture_output=True, text=True, timeout=280,
                               env=mpi_env())
            if "built without MPI" not in p.stderr:
                expect(p.returncode == 0, f"{name}: mpirun exit {p.returncode}: {p.stderr}")
                expect(filecmp.cmp(one, m, shallow=False), f"{name}: 2 MPI ranks differ from one device")
elif CASE == "multi_input_bad":
    # Every refused case exits 2 with a message naming the input.
    a = os.path.join(DIR, "concat_mlp_a.npy")
    b = os.path.join(DIR, "concat_mlp_b.npy")
    short = cli.save("b_short.npy", np.load(b)[:10])
    m = model("concat_mlp")
    cases = (
        (["--input", f"a={a}"], "input 'b' is missing (the model's inputs: 'a', 'b'"),
        (["--input", f"c={a}", "--input", f"b={b}"], "the model has no input 'c' (its inputs: 'a', 'b')"),
        (["--input", f"a={a}", "--input", f"a={b}"], "input 'a' is given twice"),
        (["--input", a], "the model has 2 inputs ('a', 'b'); give each as --input NAME=FILE.npy"),
        (["--input", f"a={b}", "--input", f"b={b}"], "--input a needs [rows, 6]"),
        (["--input", f"a={a}", "--input", f"b={short}"], "--input b=" + short + ": 10 rows, but input 'a'"),
        (["--input", f"a={a}", "--input", f"b={b}", "--calibrate", f"a={a}"], "--calibrate: input 'b' is missing"),
    )
    for args, msg in cases:
        rc, so, se = cli.run("run", m, *args, "--backend", "ref", "-q")
        expect(rc == 2 and msg in se, f"{args}: exit {rc}, stderr {se!r}, wanted {msg!r}")
    # A one-input model: FILE or NAME=FILE with its name; another name is refused.
    digits = os.path.join(EXAMPLES, "digits")
    one = os.path.join(digits, "digits_mlp.onnx")
    x = cli.save("x.npy", np.load(os.path.join(digits, "test_x.npy"))[:8])
    y1, y2 = out("y1.npy"), out("y2.npy")
    cli.run_ok("run", one, "--input", x, "--backend", "ref", "-q", "--output", y1)
    rc, so, se = cli.run("run", one, "--input", f"nosuch={x}", "--backend", "ref", "-q")
    expect(rc == 2 and "the model has no input 'nosuch'" in se, f"exit {rc} {se}")
    rc, so, se = cli.run("run", one, "--input", x, "--input", x, "--backend", "ref", "-q")
    expect(rc == 2 and "--input given 2 times; the model has one input" in se, f"exit {rc} {se}")
    # --help explains NAME=FILE.
    so = cli.run_ok("run", "--help")
    expect("NAME=FILE.npy" in so, so)
else:
    print("unknown case", CASE)
    sys.exit(1)
print("PASS", CASE)
