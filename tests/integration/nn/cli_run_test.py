#!/usr/bin/python3
"""Integration tests of `tpuw run`: cli_run_test.py TPUW CASE DIGITS_DIR (exit 77 = skipped).

Uses the committed digits example (model, held-out split, calibration rows); needs only NumPy."""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tpuw_cli_harness import CliHarness, expect  # noqa: E402

TPUW, CASE, DIGITS = sys.argv[1], sys.argv[2], sys.argv[3]
CLI = CliHarness(TPUW, "tpuw_run_")
TMP = CLI.tmp
run = CLI.run
run_ok = CLI.run_ok
save = CLI.save
write = CLI.write
MODEL = os.path.join(DIGITS, "digits_mlp.onnx")
TEST_X = os.path.join(DIGITS, "test_x.npy")
TEST_Y = os.path.join(DIGITS, "test_y.npy")
CALIB = os.path.join(DIGITS, "calib_x.npy")


def bad_input_case(args, needle):
    """tpuw run on bad input: exit 2, a message naming the problem, no output file."""
    out = os.path.join(TMP, "y.npy")
    rc, so, se = run("run", *args, "--output", out, "--backend", "ref", "-q")
    expect(rc == 2, f"exit code {rc}, expected 2; stdout: {so} stderr: {se}")
    expect(needle in se, f"'{needle}' not in stderr: {se}")
    expect("tpuw: error:" in se, f"no error line: {se}")
    expect(not os.path.exists(out), "output written despite the error")


def accuracy_line(so):
    for line in so.splitlines():
        if line.startswith("accuracy"):
            return line
    expect(False, f"no accuracy line in {so}")


if CASE == "digits_ref":
    out = os.path.join(TMP, "y.npy")
    so = run_ok("run", MODEL, "--input", TEST_X, "--output", out, "--labels", TEST_Y, "--calibrate", CALIB,
                "--backend", "ref", "--check")
    y = np.load(out)
    labels = np.load(TEST_Y)
    expect(y.dtype == np.float32 and y.shape == (359, 10), f"{y.dtype} {y.shape}")
    expect(np.allclose(y.sum(axis=1), 1.0, atol=1e-5), "softmax rows do not sum to 1")
    acc = float(np.mean(y.argmax(axis=1) == labels))
    line = accuracy_line(so)
    expect(f"int8 on ref {100 * acc:.2f}%" in line, f"{line} vs {acc}")
    expect(acc >= 0.95, f"int8 accuracy {acc}")
    for needle in ["2 dense layers", "softmax (host)", "cycles went to", "min bytes", "check: device output equals"]:
        expect(needle in so, f"'{needle}' not in {so}")

elif CASE == "digits_rtl_batches":
    if run("info", "--backend", "rtl", "--json")[0] != 0:
        sys.exit(77)  # a build without the rtl backend
    ref_out, rtl_out = os.path.join(TMP, "ref.npy"), os.path.join(TMP, "rtl.npy")
    run_ok("run", MODEL, "--input", TEST_X, "--output", ref_out, "--calibrate", CALIB, "--backend", "ref", "-q")
    so = run_ok("run", MODEL, "--input", TEST_X, "--output", rtl_out, "--calibrate", CALIB, "--backend", "rtl",
                "--array-n", "16", "--batch", "128", "--labels", TEST_Y, "--check", "-q")
    expect("in 3 batches of 128" in so, so)
    a, b = np.load(ref_out), np.load(rtl_out)
    expect(a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32)),
           "rtl (3 batches) and ref (1 batch) outputs differ")

elif CASE == "json_keys":
    so = run_ok("run", MODEL, "--input", TEST_X, "--labels", TEST_Y, "--calibrate", CALIB, "--backend", "ref",
                "--json")
    j = json.loads(so)
    for key in ["model", "backend", "array_n", "rows", "batch", "batches", "input_scale", "layers", "cycles",
                "utilization", "rd_bytes", "wr_bytes", "min_bytes", "perf", "accuracy"]:
        expect(key in j, f"missing {key}: {so}")
    expect(j["rows"] == 359 and j["batches"] == 1 and len(j["layers"]) == 2, so)
    l0, l1 = j["layers"]
    expect((l0["m"], l0["k"], l0["n"], l0["relu"]) == (359, 64, 32, True), str(l0))
    expect((l1["m"], l1["k"], l1["n"], l1["int32_output"]) == (359, 32, 10, True), str(l1))
    expect(l0["cycles"] > 0 and l0["min_bytes"] == 64 * 32 + 359 * 64 + 359 * 32, str(l0))
    expect(l0["mxu_active"] + l1["mxu_active"] == j["perf"]["mxu_active"], so)
    acc = j["accuracy"]
    expect(acc["rows"] == 359 and acc["int8"] >= acc["float"] - 0.01, str(acc))

elif CASE == "image_shape_input":
    x = np.load(TEST_X)
    flat, img = os.path.join(TMP, "flat.npy"), os.path.join(TMP, "img.npy")
    run_ok("run", MODEL, "--input", TEST_X, "--output", flat, "--backend", "ref", "-q")
    run_ok("run", MODEL, "--input", save("x_img.npy", x.reshape(-1, 1, 8, 8)), "--output", img, "--backend", "ref",
           "-q")
    expect(np.array_equal(np.load(flat), np.load(img)), "[rows, 1, 8, 8] input differs from [rows, 64]")
    f32 = os.path.join(TMP, "f32.npy")
    run_ok("run", MODEL, "--input", save("x_f32.npy", x.astype(np.float32)), "--output", f32, "--backend", "ref",
           "-q")
    expect(np.array_equal(np.load(flat), np.load(f32)), "float32 input differs from uint8 input")

elif CASE == "missing_model":
    bad_input_case([os.path.join(TMP, "nope.onnx"), "--input", TEST_X], "nope.onnx")

elif CASE == "truncated_model":
    data = open(MODEL, "rb").read()
    bad_input_case([write("trunc.onnx", data[: len(data) // 2]), "--input", TEST_X], "trunc.onnx")
    bad_input_case([write("empty.onnx", b""), "--input", TEST_X], "empty")

elif CASE == "garbage_model":
    bad_input_case([write("garbage.onnx", bytes(range(256)) * 8), "--input", TEST_X], "garbage.onnx")
    bad_input_case([TEST_X, "--input", TEST_X], "test_x.npy")  # a .npy is not a model

elif CASE == "unsupported_model":
    data = open(MODEL, "rb").read()
    expect(b"Relu" in data, "model has no Relu")
    # Same-length rename keeps the protobuf valid: the ReLU node becomes a Sinh node (Tanh runs
    # since ISA 1.2, as a lookup table).
    bad_input_case([write("sinh.onnx", data.replace(b"Relu", b"Sinh")), "--input", TEST_X], "(Sinh)")

elif CASE == "bad_input_dtype":
    x = np.load(TEST_X)
    bad_input_case([MODEL, "--input", save("x64.npy", x.astype(np.float64))], "x64.npy")
    bad_input_case([MODEL, "--input", save("x32.npy", x.astype(np.int32))], "dtype is int32")
    xf = x.astype(np.float32)
    xf[3, 5] = np.nan
    bad_input_case([MODEL, "--input", save("xnan.npy", xf)], "finite")

elif CASE == "bad_input_features":
    x = np.load(TEST_X)
    bad_input_case([MODEL, "--input", save("x63.npy", x[:, :63])], "x63.npy")
    bad_input_case([MODEL, "--input", save("x0.npy", x[:0])], "no rows")
    bad_input_case([MODEL, "--input", TEST_X, "--calibrate", save("c48.npy", x[:, :48])], "c48.npy")

elif CASE == "bad_labels":
    y = np.load(TEST_Y)
    bad_input_case([MODEL, "--input", TEST_X, "--labels", save("y_short.npy", y[:10])], "y_short.npy")
    y2 = y.copy()
    y2[7] = 12
    bad_input_case([MODEL, "--input", TEST_X, "--labels", save("y_range.npy", y2)], "label 12 of row 7")
    bad_input_case([MODEL, "--input", TEST_X, "--labels", save("y_f.npy", y.astype(np.float32))], "y_f.npy")

elif CASE == "missing_output_dir":
    out = os.path.join(TMP, "nodir", "y.npy")
    rc, so, se = run("run", MODEL, "--input", TEST_X, "--output", out, "--backend", "ref")
    expect(rc == 2 and "does not exist" in se, f"{rc} {se}")
    expect(not os.path.exists(out), "output written")

elif CASE == "usage_error":
    rc, so, se = run("run", MODEL)  # --input is required
    expect(rc == 2, f"exit {rc}: {se}")
    rc, so, se = run("run", MODEL, "--input", TEST_X, "--backend", "gpu")
    expect(rc == 2, f"exit {rc}: {se}")
    rc, so, se = run("run", MODEL, "--input", TEST_X, "--backend", "ref", "--array-n", "5")
    expect(rc == 2 and "--array-n 5" in se, f"exit {rc}: {se}")

elif CASE == "bf16_digits_ref":
    # --precision bf16: no calibration, accuracy next to int8 and the float model, --check bit-exact.
    out = os.path.join(TMP, "y.npy")
    so = run_ok("run", MODEL, "--input", TEST_X, "--output", out, "--labels", TEST_Y, "--precision", "bf16",
                "--backend", "ref", "--check")
    y = np.load(out)
    labels = np.load(TEST_Y)
    expect(y.dtype == np.float32 and y.shape == (359, 10), f"{y.dtype} {y.shape}")
    expect(np.allclose(y.sum(axis=1), 1.0, atol=1e-5), "softmax rows do not sum to 1")
    acc = float(np.mean(y.argmax(axis=1) == labels))
    line = accuracy_line(so)
    expect(f"bf16 on ref {100 * acc:.2f}%" in line, f"{line} vs {acc}")
    expect(acc >= 0.95, f"bf16 accuracy {acc}")
    for needle in ["2 dense layers", "bf16: input and weights rounded", "no calibration", "cycles went to",
                   "[fp32 out]", "check: device output equals the CPU bf16"]:
        expect(needle in so, f"'{needle}' not in {so}")
    j8 = json.loads(run_ok("run", MODEL, "--input", TEST_X, "--labels", TEST_Y, "--calibrate", CALIB, "--backend",
                           "ref", "--json"))
    jb = json.loads(run_ok("run", MODEL, "--input", TEST_X, "--labels", TEST_Y, "--precision", "bf16", "--backend",
                           "ref", "--json"))
    # bf16 keeps the float model's accuracy within a point; the float model's accuracy is the same figure.
    expect(abs(jb["accuracy"]["bf16"] - jb["accuracy"]["float"]) <= 0.01, str(jb["accuracy"]))
    expect(jb["accuracy"]["float"] == j8["accuracy"]["float"], f"{jb['accuracy']} {j8['accuracy']}")
    print(f"digits: int8 {j8['accuracy']['int8']:.4f} bf16 {jb['accuracy']['bf16']:.4f} float "
          f"{jb['accuracy']['float']:.4f}")

elif CASE == "bf16_json":
    so = run_ok("run", MODEL, "--input", TEST_X, "--labels", TEST_Y, "--precision", "bf16", "--backend", "ref",
                "--json", "--check")
    j = json.loads(so)
    for key in ["model", "backend", "precision", "array_n", "rows", "batch", "batches", "layers", "cycles",
                "utilization", "rd_bytes", "wr_bytes", "min_bytes", "perf", "accuracy", "check"]:
        expect(key in j, f"missing {key}: {so}")
    expect(j["precision"] == "bf16" and "input_scale" not in j and "calibration" not in j, so)
    expect(j["check"] == {"cpu": "equal"}, so)
    l0, l1 = j["layers"]
    expect((l0["m"], l0["k"], l0["n"], l0["relu"], l0["fp32_output"]) == (359, 64, 32, True, False), str(l0))
    expect((l1["m"], l1["k"], l1["n"], l1["fp32_output"]) == (359, 32, 10, True), str(l1))
    expect(l0["min_bytes"] == 2 * 64 * 32 + 2 * 359 * 64 + 2 * 359 * 32, str(l0))
    expect(l1["min_bytes"] == 2 * 32 * 10 + 2 * 359 * 32 + 4 * 359 * 10, str(l1))
    expect(l0["cycles"] + l1["cycles"] == j["cycles"] == j["perf"]["cycles"], so)
    expect(l0["mxu_active"] + l1["mxu_active"] == j["perf"]["mxu_active"], so)
    expect(l0["rd_bytes"] + l1["rd_bytes"] + 16 == j["rd_bytes"], so)
    expect(0 < j["utilization"] <= 1 and j["accuracy"]["bf16"] >= 0.95, so)
    j8 = json.loads(run_ok("run", MODEL, "--input", TEST_X, "--backend", "ref", "--json"))
    expect(j8["precision"] == "int8" and "input_scale" in j8, "int8 report keys changed")

elif CASE == "bf16_rtl_batches":
    if run("info", "--backend", "rtl", "--json")[0] != 0:
        sys.exit(77)  # a build without the rtl backend
    ref_out, rtl_out = os.path.join(TMP, "ref.npy"), os.path.join(TMP, "rtl.npy")
    run_ok("run", MODEL, "--input", TEST_X, "--output", ref_out, "--precision", "bf16", "--backend", "ref", "-q")
    so = run_ok("run", MODEL, "--input", TEST_X, "--output", rtl_out, "--precision", "bf16", "--backend", "rtl",
                "--array-n", "16", "--batch", "128", "--labels", TEST_Y, "--check", "-q")
    expect("in 3 batches of 128" in so and "bf16 on rtl" in so, so)
    a, b = np.load(ref_out), np.load(rtl_out)
    expect(a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32)),
           "bf16: rtl (3 batches) and ref (1 batch) outputs differ")

elif CASE == "bad_precision":
    out = os.path.join(TMP, "y.npy")
    rc, so, se = run("run", MODEL, "--input", TEST_X, "--precision", "bogus", "--backend", "ref", "--output", out)
    expect(rc == 2 and "--precision" in se and "bogus" in se, f"exit {rc}: {se}")
    expect(not os.path.exists(out), "output written")
    bad_input_case([MODEL, "--input", TEST_X, "--precision", "bf16", "--calibrate", CALIB], "needs no calibration")
    bad_input_case([MODEL, "--input", TEST_X, "--precision", "bf16", "--devices", "2"], "one device")

elif CASE == "labels_int64":
    y = np.load(TEST_Y)
    so32 = run_ok("run", MODEL, "--input", TEST_X, "--labels", save("y32.npy", y.astype(np.int32)), "--backend",
                  "ref", "--json")
    so64 = run_ok("run", MODEL, "--input", TEST_X, "--labels", save("y64.npy", y.astype(np.int64)), "--backend",
                  "ref", "--json")
    a32, a64 = json.loads(so32)["accuracy"], json.loads(so64)["accuracy"]
    expect(a32["int8"] == a64["int8"] and a64["rows"] == 359, f"{a32} {a64}")
    y2 = y.astype(np.int64)
    y2[5] = 1 << 40
    bad_input_case([MODEL, "--input", TEST_X, "--labels", save("y_big.npy", y2)], "label 1099511627776 of row 5")

elif CASE == "host_ops":
    # LayerNormalization (axis 1 of [2, 3, 4, 5]) of the graph input: on the host before the device
    # program (the identity layer), int8 and bf16: marked "host" in the report with its bytes,
    # --check holds the final output bit for bit.
    case = os.path.join(os.path.dirname(DIGITS), "..", "tests", "conformance", "cases",
                        "test_layer_normalization_4d_axis1")
    model, x = os.path.join(case, "model.onnx"), os.path.join(case, "input.npy")
    want = np.load(os.path.join(case, "expected.npy")).reshape(2, -1)
    for prec, tol in (("int8", 0.06), ("bf16", 0.02)):
        out = os.path.join(TMP, f"ln_{prec}.npy")
        so = run_ok("run", model, "--input", x, "--output", out, "--precision", prec, "--backend", "ref", "--check")
        expect("-> layernorm (host) -> 1 dense layer" in so and "(LayerNormalization) [host]" in so
               and "on the input before the device" in so and "check: device output" in so, so)
        y = np.load(out)
        expect(y.shape == (2, 60) and np.max(np.abs(y - want)) <= tol * np.max(np.abs(want)), f"{prec}: {y}")
        j = json.loads(run_ok("run", model, "--input", x, "--precision", prec, "--backend", "ref", "--json"))
        h = j["host_ops"]
        expect(j["host_op"] == "none" and j["input_host_op"] == "layernorm" and len(h) == 1 and h[0]["on"] == "host"
               and h[0]["op"] == "layernorm" and h[0]["before_device"], so)
        expect(h[0]["name"].endswith("(LayerNormalization)") and h[0]["rd_bytes"] == 2 * 60 * 4
               and h[0]["wr_bytes"] == 2 * 60 * 4 and h[0]["features"] == 60, str(h))
    # Softmax over the batch axis: refused naming the node.
    bad = os.path.join(os.path.dirname(DIGITS), "..", "tests", "conformance", "cases", "test_softmax_axis_0")
    bad_input_case([os.path.join(bad, "model.onnx"), "--input", os.path.join(bad, "input.npy")], "is the batch axis")

elif CASE == "reshape_fixed_batch":
    # ONNX's Reshape to [2, 12] of a [2, 3, 4] input fixes dimension 0: it runs for exactly 2 rows
    # (the -1/0 of the shape resolved against the row's 12 features) and refuses any other number.
    case = os.path.join(os.path.dirname(DIGITS), "..", "tests", "conformance", "cases", "test_reshape_reduced_dims")
    model, x = os.path.join(case, "model.onnx"), os.path.join(case, "input.npy")
    want = np.load(os.path.join(case, "expected.npy"))
    for prec in ("int8", "bf16"):
        out = os.path.join(TMP, f"rs_{prec}.npy")
        run_ok("run", model, "--input", x, "--output", out, "--precision", prec, "--backend", "ref", "--check", "-q")
        y = np.load(out)
        expect(y.shape == (2, 12) and np.max(np.abs(y - want)) <= 0.06 * np.max(np.abs(want)), f"{prec}: {y}")
    x3 = save("x3.npy", np.concatenate([np.load(x)] * 2)[:3])
    bad_input_case([model, "--input", x3], "needs exactly 2 input rows")
    bad_input_case([model, "--input", x3], "node '#0' (Reshape): reshape to [2, 12]")

elif CASE == "multi_output":
    # Logits and their Softmax and LogSoftmax as three graph outputs: one .npy per output
    # (out.npy -> out.NAME.npy, '/' -> '_'), each named in the report and --json; --check holds
    # every output bit for bit.
    model = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "multi_output.onnx")
    x = save("x.npy", np.random.default_rng(3).uniform(-1, 1, (7, 6)).astype(np.float32))
    for prec in ("int8", "bf16"):
        out = os.path.join(TMP, f"{prec}.npy")
        so = run_ok("run", model, "--input", x, "--output", out, "--precision", prec, "--backend", "ref", "--check")
        expect("3 outputs: 'logits' [batch, 4], 'probs' [batch, 4] (softmax on the host)" in so, so)
        expect("-> output 'head/logp'" in so and "check: device output" in so, so)
        files = {n: os.path.join(TMP, f"{prec}.{f}.npy") for n, f in (("logits", "logits"), ("probs", "probs"),
                                                                        ("head/logp", "head_logp"))}
        for n, f in files.items():
            expect(f"output '{n}' -> {f} (float32, (7, 4))" in so, so)
        expect(not os.path.exists(out), "--output itself written for a model with several outputs")
        z, p, lp = (np.load(files[n]).astype(np.float64) for n in ("logits", "probs", "head/logp"))
        expect(z.shape == p.shape == lp.shape == (7, 4), f"{z.shape} {p.shape} {lp.shape}")
        e = np.exp(z - z.max(axis=1, keepdims=True))
        expect(np.allclose(p, e / e.sum(axis=1, keepdims=True), atol=1e-6), f"{prec}: probs is not softmax(logits)")
        expect(np.allclose(lp, np.log(e / e.sum(axis=1, keepdims=True)), atol=1e-5), f"{prec}: logp")
        j = json.loads(run_ok("run", model, "--input", x, "--output", out, "--precision", prec, "--backend", "ref",
                              "--json"))
        expect([o["name"] for o in j["outputs"]] == ["logits", "probs", "head/logp"], str(j["outputs"]))
        expect([o["host_op"] for o in j["outputs"]] == ["none", "softmax", "logsoftmax"], str(j["outputs"]))
        expect(j["outputs"][2]["file"] == files["head/logp"], str(j["outputs"]))
        expect([(h["output"], h["rd_bytes"]) for h in j["host_ops"]] == [("probs", 7 * 4 * 4), ("head/logp", 7 * 4 * 4)],
               str(j["host_ops"]))
    # --labels scores the first output.
    so = run_ok("run", model, "--input", x, "--labels", save("l.npy", np.arange(7) % 4), "--backend", "ref")
    expect("accuracy on" in so, so)

elif CASE == "two_heads":
    # Two heads on one trunk ('cls' = Softmax of one Gemm, 'box' = another Gemm): one device layer of
    # 3 + 4 columns, each output its columns; int8 and bf16 agree within int8's error.
    model = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "two_heads.onnx")
    x = save("x.npy", np.random.default_rng(4).uniform(-1, 1, (7, 6)).astype(np.float32))
    got = {}
    for prec in ("int8", "bf16"):
        out = os.path.join(TMP, f"{prec}.npy")
        so = run_ok("run", model, "--input", x, "--output", out, "--precision", prec, "--backend", "ref", "--check")
        expect("2 dense layers [batch, 7] -> 2 outputs: 'cls' [batch, 3] (softmax on the host), 'box' [batch, 4]" in so, so)
        expect("cls_head (Gemm) | box_head (Gemm)" in so and "check: device output" in so, so)
        cls, box = np.load(os.path.join(TMP, f"{prec}.cls.npy")), np.load(os.path.join(TMP, f"{prec}.box.npy"))
        expect(cls.shape == (7, 3) and box.shape == (7, 4), f"{cls.shape} {box.shape}")
        expect(np.allclose(cls.sum(axis=1), 1.0, atol=1e-5), f"{prec}: cls rows do not sum to 1")
        got[prec] = (cls, box)
    for a, b in zip(got["int8"], got["bf16"]):
        expect(np.max(np.abs(a - b)) <= 0.1 * np.max(np.abs(b)), f"int8 {a} vs bf16 {b}")

else:
    print("unknown case", CASE)
    sys.exit(1)
print("ok")
