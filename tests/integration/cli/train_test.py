#!/usr/bin/python3
"""tpuw train, driven as a user would: every bad input (exit 2, nothing written), a diverging loss
(exit 3, the last checkpoint kept), checkpoint/resume bit identity, the --json report, the trained
ONNX file (names, shapes, values; it runs with `tpuw run`), the device backends once built.

    train_test.py TPUW CASE EXAMPLES_DIR

Data: examples/digits (intensity / 16, float32), the PyTorch-exported untrained 64-32-10 MLP of
examples/fashion_mnist/reference; tests/integration/cli/data/sigmoid_mlp.onnx (an untrainable model).
"""
import json
import os
import shutil
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tpuw_cli_harness import CliHarness, expect  # noqa: E402

TPUW, CASE, EXAMPLES = sys.argv[1], sys.argv[2], sys.argv[3]
DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
MODEL = os.path.join(EXAMPLES, "fashion_mnist", "reference", "digits_mlp_untrained.onnx")
cli = CliHarness(TPUW, "tpuw_train_")

x_all = np.load(os.path.join(EXAMPLES, "digits", "digits_x.npy")).astype(np.float32) / np.float32(16)
y_all = np.load(os.path.join(EXAMPLES, "digits", "digits_y.npy")).astype(np.int64)
X = cli.save("x.npy", x_all[:300])
Y = cli.save("y.npy", y_all[:300])
OUT = os.path.join(cli.tmp, "out.onnx")


def train(*extra, x=X, y=Y, model=MODEL, out=OUT):
    return cli.run("train", model, "--input", x, "--labels", y, "--output", out, "--backend", "host", "-q", *extra)


def bad(args, want, **kw):
    """tpuw train must exit 2 naming the problem, and write nothing."""
    if os.path.exists(OUT):
        os.remove(OUT)
    rc, so, se = train(*args, **kw)
    expect(rc == 2, f"{args}: exit {rc}, expected 2; stderr: {se}")
    expect(want in se, f"{args}: stderr lacks {want!r}: {se}")
    expect(not os.path.exists(OUT), f"{args}: {OUT} was written")


if CASE == "train_bad_labels":
    y = y_all[:300].copy()
    y[17] = 10
    bad([], "label 10 of row 17 is out of range", y=cli.save("range.npy", y))
    y[17] = -1
    bad([], "label -1 of row 17 is out of range", y=cli.save("neg.npy", y))
    bad([], "labels must be integer class indices", y=cli.save("float.npy", y_all[:300].astype(np.float32)))
    bad([], "299 labels, but", y=cli.save("short.npy", y_all[:299]))
    bad([], "1-D", y=cli.save("2d.npy", y_all[:300].reshape(100, 3)))
    for dt in (np.int32, np.uint8):  # accepted dtypes
        rc, so, se = train("--epochs", "1", y=cli.save(f"y_{dt.__name__}.npy", y_all[:300].astype(dt)))
        expect(rc == 0, f"labels {dt.__name__}: exit {rc}: {se}")

elif CASE == "train_bad_inputs":
    x = x_all[:300].copy()
    x[5, 9] = np.nan
    bad([], "row 5 feature 9 is nan", x=cli.save("nan.npy", x))
    x[5, 9] = np.inf
    bad([], "row 5 feature 9 is inf", x=cli.save("inf.npy", x))
    bad([], "dtype is int32", x=cli.save("int.npy", (x_all[:300] * 16).astype(np.int32)))
    bad([], "shape (300, 63)", x=cli.save("narrow.npy", x_all[:300, :63]))
    bad(["--validate", X], "--validate and --validate-labels go together")
    y = y_all[:300].copy()
    y[0] = 12
    bad(["--validate", X, "--validate-labels", cli.save("vbad.npy", y)], "vbad.npy: label 12 of row 0")
    bad([], "sigmoid_mlp.onnx: node 'act' (Sigmoid)", model=os.path.join(DATA, "sigmoid_mlp.onnx"))
    bad([], "not a valid ONNX model", model=cli.write("junk.onnx", b"\x08\x01junk"))
    bad([], "directory", out=os.path.join(cli.tmp, "no_such_dir", "o.onnx"))

elif CASE == "train_bad_options":
    bad(["--lr", "0"], "--lr 0: the learning rate must be finite and positive")
    bad(["--lr=-0.5"], "--lr -0.5: the learning rate must be finite and positive")
    bad(["--lr", "nan"], "--lr nan")
    bad(["--lr", "inf"], "--lr inf")
    bad(["--momentum=-0.1"], "--momentum -0.1: must be finite and >= 0")
    bad(["--weight-decay=-1"], "--weight-decay -1: must be finite and >= 0")
    bad(["--batch", "0"], "--batch 0: must be at least 1")
    bad(["--epochs", "0"], "--epochs 0: must be at least 1")
    bad(["--resume", os.path.join(cli.tmp, "nothing")], "not a checkpoint directory")

elif CASE == "train_nan_loss":
    ck = os.path.join(cli.tmp, "ck")
    rc, so, se = train("--lr", "1e30", "--momentum", "0.9", "--batch", "32", "--checkpoint", ck, "--checkpoint-every", "1")
    expect(rc == 3, f"exit {rc}, expected 3: {se}")
    expect("the loss became NaN at step 2 (epoch 1, batch 2 of 10)" in se or "the loss became infinite at step 2" in se,
           f"message: {se}")
    expect("the last checkpoint (" in se and "step 1) is kept" in se, f"message: {se}")
    expect(not os.path.exists(OUT), "output written after a NaN loss")
    m = json.load(open(os.path.join(ck, "manifest.json")))
    expect(m["step"] == 1, f"checkpoint step {m['step']}, expected 1 (the last good one)")

elif CASE == "train_resume":
    common = ["--batch", "32", "--lr", "0.05", "--momentum", "0.9", "--weight-decay", "1e-4", "--epochs", "3",
              "--shuffle", "--seed", "11"]
    full = os.path.join(cli.tmp, "full.onnx")
    rc, so, se = train(*common, out=full)
    expect(rc == 0, f"full run: {se}")
    ck = os.path.join(cli.tmp, "ck")
    for stop in ("13", "10", "20"):  # mid-epoch, the end of an epoch, mid-epoch again
        part = os.path.join(cli.tmp, f"part{stop}.onnx")
        args = common + ["--checkpoint", ck, "--checkpoint-every", "4", "--max-steps", stop]
        if stop != "13":
            args += ["--resume", ck]
        rc, so, se = train(*args, out=part)
        expect(rc == 0, f"stop {stop}: {se}")
        m = json.load(open(os.path.join(ck, "manifest.json")))
        expect(m["step"] == max(13, int(stop)), f"checkpoint at step {m['step']}")
    rc, so, se = train(*common, "--resume", ck, out=OUT)
    expect(rc == 0, f"resume: {se}")
    expect(open(OUT, "rb").read() == open(full, "rb").read(), "resumed weights differ from the uninterrupted run")
    rc, so, se = train(*(common[:-2] + ["--seed", "12"]), "--resume", ck)
    expect(rc == 2 and "--seed" in se, f"resume with another seed: exit {rc}: {se}")
    rc, so, se = train(*(["--batch", "16"] + common[2:]), "--resume", ck)
    expect(rc == 2 and "--batch 32, this run has 16" in se, f"resume with another batch: exit {rc}: {se}")
    files = sorted(os.listdir(ck))  # two generations: step 20 and step 16 before it
    expect(len(files) == 18 and "manifest.json" in files and "manifest.prev.json" in files, f"checkpoint files: {files}")
    expect(json.load(open(os.path.join(ck, "manifest.prev.json")))["step"] == 16, "the previous generation")

elif CASE == "train_checkpoint_checks":
    # Issue 29: checkpoints are validated in full (positions, sizes, checksums); a damaged newest
    # generation falls back to the previous one.
    import hashlib
    common = ["--batch", "32", "--lr", "0.05", "--momentum", "0.9", "--epochs", "2", "--shuffle", "--seed", "5"]
    full = os.path.join(cli.tmp, "full.onnx")
    rc, so, se = train(*common, out=full)
    expect(rc == 0, f"full run: {se}")
    ck = os.path.join(cli.tmp, "ck")

    def fresh(every="0", stop="3"):
        shutil.rmtree(ck, ignore_errors=True)
        rc, so, se = train(*common, "--checkpoint", ck, "--checkpoint-every", every, "--max-steps", stop)
        expect(rc == 0, f"checkpointed run: {se}")

    def edit(field, value, resum=True):
        """Sets a manifest field; with resum the checksum is recomputed as docs/training.md says."""
        p = os.path.join(ck, "manifest.json")
        m = json.load(open(p))
        m[field] = value
        del m["sha256"]
        text = json.dumps(m, indent=2)[:-2] + ",\n"
        digest = hashlib.sha256(text.encode()).hexdigest() if resum else "0" * 64
        open(p, "w").write(text + f'  "sha256": "{digest}"\n}}\n')

    def refused(want):
        if os.path.exists(OUT):
            os.remove(OUT)
        rc, so, se = train(*common, "--resume", ck)
        expect(rc == 2 and want in se, f"resume: exit {rc}, expected 2 with '{want}': {se}")
        expect(not os.path.exists(OUT), "output written")

    def resumes_identically(fallback):
        if os.path.exists(OUT):
            os.remove(OUT)
        rc, so, se = train(*common, "--resume", ck)
        expect(rc == 0, f"resume: exit {rc}: {se}")
        expect(("resuming from the previous one" in se) == fallback, f"fallback {fallback}: {se}")
        expect(open(OUT, "rb").read() == open(full, "rb").read(), "resumed weights differ from the uninterrupted run")
        return se

    # The example: position 10^12 (checksum recomputed, so only the position check stands).
    fresh()
    edit("position", 10**12)
    refused("position 1000000000000 in the epoch exceeds the 3 steps taken")
    # Variants: a position past the end of an epoch (step matching it); a step that does not match
    # epoch and position; an edit without the checksum and no previous generation to fall back to.
    fresh()
    edit("position", 11)
    edit("step", 11)
    refused("position 11 is past the end of an epoch (300 rows at --batch 32 are 10 steps, positions 0..10)")
    fresh()
    edit("step", 7)
    refused("step 7 does not match epoch 0 position 3")
    fresh()
    edit("position", 2, resum=False)
    refused("checksum mismatch")
    fresh()
    edit("epoch", 1, resum=True)
    refused("does not match epoch 1 position 3")
    # Torn manifest / damaged tensor with two generations: the previous one is used, same bytes.
    fresh(every="2", stop="5")  # generations at steps 2, 4, 5: manifest step 5, previous step 4
    expect(json.load(open(os.path.join(ck, "manifest.prev.json")))["step"] == 4, "previous generation")
    data = open(os.path.join(ck, "manifest.json"), "rb").read()
    open(os.path.join(ck, "manifest.json"), "wb").write(data[:len(data) // 2])
    se = resumes_identically(True)
    expect("manifest.json: not valid JSON" in se and "manifest.prev.json (step 4)" in se, f"the warning: {se}")
    fresh(every="2", stop="5")
    m = json.load(open(os.path.join(ck, "manifest.json")))
    t = os.path.join(ck, m["params"][1]["file"])
    data = bytearray(open(t, "rb").read())
    data[-3] ^= 0x10
    open(t, "wb").write(bytes(data))
    se = resumes_identically(True)
    expect("checksum mismatch" in se, f"the warning: {se}")
    fresh(every="2", stop="5")
    os.remove(os.path.join(ck, m["momentum"][0]["file"]))
    resumes_identically(True)
    # Both generations damaged: refused, naming both.
    fresh(every="2", stop="5")
    open(os.path.join(ck, "manifest.json"), "w").write("{")
    open(os.path.join(ck, "manifest.prev.json"), "w").write("")
    refused("the previous checkpoint is not usable either")
    # An undamaged checkpoint resumes without a warning.
    fresh(every="2", stop="5")
    resumes_identically(False)

elif CASE == "train_json":
    vx = cli.save("vx.npy", x_all[1440:])
    vy = cli.save("vy.npy", y_all[1440:].astype(np.uint8))
    rc, so, se = train("--batch", "64", "--epochs", "2", "--lr", "0.1", "--json", "--validate", vx,
                       "--validate-labels", vy, "--limit", "250")
    expect(rc == 0, f"exit {rc}: {se}")
    j = json.loads(so)
    for k in ("backend", "epochs", "cycles_per_step", "utilization", "steps", "rows", "batch", "lr"):
        expect(k in j, f"--json lacks {k}: {j.keys()}")
    expect(j["backend"] == "host" and j["rows"] == 250 and j["steps"] == 8 and j["lr"] == 0.1, f"{j}")
    expect(len(j["epochs"]) == 2, f"epochs: {j['epochs']}")
    for i, e in enumerate(j["epochs"]):
        expect(e["epoch"] == i + 1 and e["loss"] > 0 and 0 <= e["accuracy"] <= 1 and e["seconds"] >= 0, f"{e}")
    expect(j["epochs"][1]["loss"] < j["epochs"][0]["loss"], "the loss did not go down")
    rc, so, se = cli.run("train", MODEL, "--input", X, "--labels", Y, "--output", OUT, "--backend", "host",
                         "--progress", "--epochs", "1")
    expect(rc == 0 and "epoch 1/1 [" in se and "epoch 1/1: loss" in so, f"progress/human output: {so} {se}")

elif CASE == "train_output_model":
    ck = os.path.join(cli.tmp, "ck")
    rc, so, se = train("--epochs", "3", "--batch", "32", "--lr", "0.1", "--momentum", "0.9", "--checkpoint", ck)
    expect(rc == 0, f"exit {rc}: {se}")
    m = json.load(open(os.path.join(ck, "manifest.json")))
    names = sorted(p["name"] for p in m["params"])
    expect(names == ["fc1.bias", "fc1.weight", "fc2.bias", "fc2.weight"], f"params {names}")
    # The trained file runs like the input model (same input, same output names and shapes).
    y8 = cli.save("y8.npy", y_all[:300].astype(np.uint8))  # tpuw run's labels: uint8/int8/int32
    rc, so, se = cli.run("run", OUT, "--input", X, "--backend", "ref", "--labels", y8, "--json")
    expect(rc == 0, f"tpuw run on the trained model: {se}")
    expect(json.loads(so)["accuracy"]["float"] > 0.7, f"trained model accuracy: {so}")
    try:
        import onnx
        import onnx.numpy_helper
    except ImportError:
        sys.exit(0)
    a, b = onnx.load(OUT), onnx.load(MODEL)
    expect([n.SerializeToString() for n in a.graph.node] == [n.SerializeToString() for n in b.graph.node], "nodes")
    for ta, tb in zip(a.graph.initializer, b.graph.initializer):
        va, vb = onnx.numpy_helper.to_array(ta), onnx.numpy_helper.to_array(tb)
        expect(ta.name == tb.name and va.shape == vb.shape and va.dtype == np.float32, f"{ta.name} {va.shape}")
        expect(not np.array_equal(va, vb), f"{ta.name} not trained")
        p = next(p for p in m["params"] if p["name"] == ta.name)
        expect(np.array_equal(np.load(os.path.join(ck, p["file"])), va), f"{ta.name}: checkpoint != output")

elif CASE == "train_device":
    rc, so, se = cli.run("train", MODEL, "--input", X, "--labels", Y, "--output", OUT, "--backend", "ref",
                         "--batch", "32", "--max-steps", "2", "--json", "-q")
    if rc == 2 and "not built yet" in se:
        print("SKIP: device training is not built yet")
        sys.exit(77)
    expect(rc == 0, f"exit {rc}: {se}")
    j = json.loads(so)
    expect(j["backend"] == "ref" and j["steps"] == 2 and j["cycles_per_step"] > 0 and 0 < j["utilization"] <= 1, f"{j}")

else:
    sys.exit(f"unknown case {CASE}")
