#!/usr/bin/python3
"""tpuw run on models with several graph inputs (examples/multi_input, docs/network_compiler.md
"Several graph inputs"): --input NAME=FILE per input, int8 and bf16 against PyTorch, rtl == ref,
--devices 2 and mpirun byte-identical to one device, the refused cases (exit 2); CNNs with several
inputs (an image and a side vector, two images in two branches, two images concatenated into one
Conv): int8 and bf16 against PyTorch, rtl == ref, their report and refusals.

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


# CNNs: (model, input names, features per input, rows).
CNNS = {"image_vector": (("x", "v"), (144, 5)), "two_images": (("a", "b"), (128, 128)),
        "concat_images": (("a", "b"), (128, 128))}
CNN_ROWS = 32


def cnn_inputs(name, flag="--input"):
    args = []
    for n in CNNS[name][0]:
        args += [flag, f"{n}={os.path.join(DIR, f'{name}_{n}.npy')}"]
    return args


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



def expect_rtl_equals_ref(names, inputs_of, tag):
    """Each model of `names` (its --input arguments from inputs_of(name)) in int8 and bf16, --check'ed
    on ref and on rtl: the two outputs are the same bytes."""
    for name in names:
        for prec in ("int8", "bf16"):
            ys = {}
            for be in ("ref", "rtl"):
                ys[be] = out(f"{tag}{name}_{prec}_{be}.npy")
                cli.run_ok("run", model(name), *inputs_of(name), "--precision", prec, "--backend", be, "--check", "-q",
                           "--output", ys[be])
            expect(filecmp.cmp(ys["ref"], ys["rtl"], shallow=False), f"{name} {prec}: rtl output differs from ref")

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
    expect_rtl_equals_ref(MODELS, inputs, "")
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
elif CASE == "multi_input_cnn_ref":
    # Every CNN in int8 and bf16 on ref: --check equal to the CPU model, within a stated tolerance of
    # PyTorch's output (int8 3 %, bf16 1 % of max |y|; measured: int8 <= 1.92 %, bf16 <= 0.32 %),
    # every input named in --json with its file, kind and bytes (int8 1, bf16 2 per value), int8 its
    # own scale (b is 10x a; v is 20x x).
    for name, (names, feats) in CNNS.items():
        want = np.load(os.path.join(DIR, name + "_expected.npy"))
        for prec, tol, size in (("int8", 0.03, 1), ("bf16", 0.01, 2)):
            y = out(f"{name}_{prec}.npy")
            j = json.loads(cli.run_ok("run", model(name), *cnn_inputs(name), "--precision", prec, "--backend", "ref",
                                      "--check", "--output", y, "-q", "--json"))
            got = np.load(y)
            expect(got.shape == want.shape, f"{name} {prec}: shape {got.shape}")
            err = float(np.max(np.abs(got - want)))
            expect(err <= tol * float(np.max(np.abs(want))), f"{name} {prec}: max error {err}")
            expect(j["check"]["cpu"] == "equal", f"{name} {prec}: {j['check']}")
            expect(j["model_kind"] == "cnn", j["model_kind"])
            expect(j["input_features"] == sum(feats), j["input_features"])
            expect([i["name"] for i in j["inputs"]] == list(names), j["inputs"])
            for i, f in zip(j["inputs"], feats):
                expect(i["features"] == f and i["bytes"] == CNN_ROWS * f * size and
                       i["file"].endswith(f"{name}_{i['name']}.npy"), i)
            expect([i["kind"] for i in j["inputs"]] == (["image", "vector"] if name == "image_vector" else ["image"] * 2),
                   j["inputs"])
            if prec == "int8":
                s = [i["scale"] for i in j["inputs"]]
                expect(8 < s[1] / s[0] < 30, f"{name}: scales {s}")
            else:
                expect("scale" not in j["inputs"][0], j["inputs"])
    # The report names every input, its file and bytes, and the int8 scales.
    so = cli.run_ok("run", model("image_vector"), *cnn_inputs("image_vector"), "--backend", "ref", "-q")
    expect("2 graph inputs: 'x' [batch, 1, 12, 12] (image" in so and "(4608 bytes)" in so and
           "'v' [batch, 5] (vector: joins the dense head)" in so and "(160 bytes)" in so and
           "input scales 'x' " in so, so)
    # The inputs in another order on the command line give the same bytes; --calibrate NAME=FILE
    # with the inputs themselves is the default; --batch splits every input by the same rows.
    ab, ba, cal, b8 = out("cab.npy"), out("cba.npy"), out("ccal.npy"), out("cb8.npy")
    args = cnn_inputs("two_images")
    cli.run_ok("run", model("two_images"), *args, "--backend", "ref", "-q", "--output", ab)
    cli.run_ok("run", model("two_images"), *args[2:], *args[:2], "--backend", "ref", "-q", "--output", ba)
    expect(filecmp.cmp(ab, ba, shallow=False), "input order on the command line changed the output")
    cli.run_ok("run", model("two_images"), *args, *cnn_inputs("two_images", "--calibrate"), "--backend", "ref",
               "-q", "--output", cal)
    expect(filecmp.cmp(ab, cal, shallow=False), "--calibrate with the inputs differs from the default")
    cli.run_ok("run", model("two_images"), *args, "--backend", "ref", "-q", "--batch", "8", "--output", b8)
    expect(filecmp.cmp(ab, b8, shallow=False), "--batch 8 differs from one batch")
elif CASE == "multi_input_cnn_rtl_vs_ref":
    # The verilated device gives ref's output bit for bit, both --check'ed, int8 and bf16.
    if not rtl_built():
        sys.exit(77)
    expect_rtl_equals_ref(CNNS, cnn_inputs, "c")
elif CASE == "multi_input_cnn_bad":
    # Refused --input forms and models, exit 2, naming the input or node.
    x = os.path.join(DIR, "image_vector_x.npy")
    v = os.path.join(DIR, "image_vector_v.npy")
    a = os.path.join(DIR, "two_images_a.npy")
    short = cli.save("v_short.npy", np.load(v)[:10])
    m = model("image_vector")
    cases = (
        (["--input", f"x={x}"], "input 'v' is missing (the model's inputs: 'x', 'v'"),
        (["--input", x], "the model has 2 inputs ('x', 'v'); give each as --input NAME=FILE.npy"),
        (["--input", f"x={x}", "--input", f"v={x}"], "needs [rows, 5] (the model input's shape)"),
        (["--input", f"x={a}", "--input", f"v={v}"], "needs [rows, 1, 12, 12]"),
        (["--input", f"x={x}", "--input", f"v={short}"], f"--input v={short}: 10 rows, but input 'x'"),
        (["--input", f"x={x}", "--input", f"w={v}"], "the model has no input 'w' (its inputs: 'x', 'v')"),
    )
    for prec in ("int8", "bf16"):
        for args, msg in cases:
            rc, so, se = cli.run("run", m, *args, "--backend", "ref", "-q", "--precision", prec)
            expect(rc == 2 and msg in se, f"{prec} {args}: exit {rc}, stderr {se!r}, wanted {msg!r}")
    # A model whose vector input is read inside the dense head (a Concat with a hidden activation):
    # refused naming the node and the input, in int8 and bf16.
    import onnx
    from onnx import helper, TensorProto, numpy_helper
    rng = np.random.default_rng(5)
    inits = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n) for n, s in
             (("cw", (2, 1, 3, 3)), ("w1", (8, 288)), ("w2", (3, 13)))]
    g = helper.make_graph(
        [helper.make_node("Conv", ["x", "cw"], ["c"], "conv", pads=[1, 1, 1, 1]),
         helper.make_node("Flatten", ["c"], ["f"], "flat"),
         helper.make_node("Gemm", ["f", "w1"], ["h"], "fc1", transB=1),
         helper.make_node("Concat", ["h", "v"], ["cat"], "cat", axis=1),
         helper.make_node("Gemm", ["cat", "w2"], ["y"], "fc2", transB=1)],
        "late_vector",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 1, 12, 12]),
         helper.make_tensor_value_info("v", TensorProto.FLOAT, ["batch", 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])], inits)
    late = os.path.join(cli.tmp, "late_vector.onnx")
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), late)
    for prec in ("int8", "bf16"):
        rc, so, se = cli.run("run", late, "--input", f"x={x}", "--input", f"v={v}", "--backend", "ref", "-q",
                             "--precision", prec)
        expect(rc == 2 and "node 'cat' (Concat)" in se and "reads the vector input 'v' inside the dense head" in se,
               f"{prec}: exit {rc}, stderr {se!r}")
else:
    print("unknown case", CASE)
    sys.exit(1)
print("PASS", CASE)
