#!/usr/bin/python3
"""--trace on tpuw run, gemm and train (docs/tracing.md): the file is Chrome trace-event JSON whose
tracks are named and whose spans nest and never overlap within a track; the host track has the
compile/upload/submit/wait spans, the device process its programs in device cycles. With --devices 2
(run, gemm, mirrored train) a driver track and a device process per device, and the all-reduce
spans; under `mpirun -np 2` (run, train) one file with every rank's processes (skipped without MPI).

    trace_test.py TPUW CASE EXAMPLES_DIR
"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tpuw_cli_harness import CliHarness, expect, mpi_env  # noqa: E402
from trace_check import check_trace, names  # noqa: E402

TPUW, CASE, EXAMPLES = sys.argv[1], sys.argv[2], sys.argv[3]
cli = CliHarness(TPUW, "tpuw_trace_")
DIGITS = os.path.join(EXAMPLES, "digits")
MODEL = os.path.join(DIGITS, "digits_mlp.onnx")
TEST_X = os.path.join(DIGITS, "test_x.npy")
TRACE = os.path.join(cli.tmp, "trace.json")


def traced(*args):
    if os.path.exists(TRACE):
        os.remove(TRACE)
    so = cli.run_ok(*args, "--trace", TRACE)
    expect(os.path.exists(TRACE), f"{args}: no trace written")
    try:
        return so, check_trace(TRACE)
    except AssertionError as e:
        expect(False, f"{args}: invalid trace: {e}")


if CASE == "trace_run":
    for precision in ("int8", "bf16"):
        so, t = traced("run", MODEL, "--input", TEST_X, "--backend", "ref", "--batch", "128", "--precision",
                       precision, "-q", "--json")
        cycles = json.loads(so)["cycles"]
        host = names(t, "host", "main")
        for n in ("import model and inputs", "open device", "compile", "upload", "submit", "wait", "read output"):
            expect(n in host, f"{precision}: host span {n!r} missing: {host}")
        expect(sum(1 for n in host if n.startswith("batch ")) == 3, f"{precision}: {host}")
        prog = [s for (pid, tid), spans in t["tracks"].items() if t["threads"][(pid, tid)] == "program"
                for s in spans]
        expect(len(prog) == 3 and sum(s[1] for s in prog) == cycles, f"{precision}: programs {prog} vs {cycles}")
        expect(prog[0][2] == f"{precision} network, 128 rows", f"{prog}")
        for lane in ("load", "compute", "store"):
            expect(names(t, "device 0: ref N=16", lane), f"{precision}: no {lane} spans")
        attributed = [s for spans in t["tracks"].values() for s in spans if s[3] == "attributed"]
        expect(len(attributed) == 6, f"{precision}: per-layer parts {attributed}")

elif CASE == "trace_gemm":
    for dtype in ("int8", "bf16"):
        so, t = traced("gemm", "--backend", "ref", "--m", "40", "--k", "50", "--n", "30", "--dtype", dtype, "--json",
                       "-q")
        j = json.loads(so)
        host = names(t, "host", "main")
        expect(f"{dtype} gemm on device 0" in host and "submit + wait" in host and "compile + upload" in host, host)
        prog = names(t, "device 0: ref N=16", "program")
        expect(prog == [f"{dtype} gemm"], f"{prog}")
        span = t["tracks"][next(k for k, v in t["threads"].items() if v == "program" and k[0] == 100)][0]
        expect(span[1] == j["cycles"], f"{span} vs {j['cycles']}")

elif CASE == "trace_train":
    model = os.path.join(EXAMPLES, "fashion_mnist", "reference", "digits_mlp_untrained.onnx")
    x = cli.save("x.npy", (np.load(os.path.join(DIGITS, "digits_x.npy")).astype(np.float32) / 16)[:100])
    y = cli.save("y.npy", np.load(os.path.join(DIGITS, "digits_y.npy")).astype(np.int64)[:100])
    out = os.path.join(cli.tmp, "out.onnx")
    so, t = traced("train", model, "--input", x, "--labels", y, "--output", out, "--backend", "ref", "--batch",
                   "32", "-q", "--json")
    j = json.loads(so)
    host = names(t, "host", "main")
    expect("compile + upload parameters" in host and [n for n in host if n.startswith("step ")] ==
           ["step 1", "step 2", "step 3", "step 4"], f"{host}")
    prog = names(t, "device 0", "program")
    expect(prog[:4] == ["step 1", "forward", "backward", "update"], f"{prog}")
    steps = [s for (pid, tid), spans in t["tracks"].items() if pid >= 100 for s in spans if s[2].startswith("step")]
    expect(abs(sum(s[1] for s in steps) - 4 * j["cycles_per_step"]) < 1e-6 * sum(s[1] for s in steps) + 1,
           f"{steps} vs {j['cycles_per_step']}")
    so, t = traced("train", model, "--input", x, "--labels", y, "--output", out, "--backend", "host", "--batch", "32",
                   "-q")
    expect(len(names(t, "host", "main")) == 5 and not [p for p in t["procs"] if p >= 100], "host trainer trace")

elif CASE == "trace_devices":
    # --devices 2: a driver track per device on the host, a device process per device.
    so, t = traced("run", MODEL, "--input", TEST_X, "--backend", "ref", "--devices", "2", "--batch", "64", "-q",
                   "--json")
    j = json.loads(so)
    # Data tasks are not pinned: the device free first may take both; every micro-batch is there once.
    drv = [n for d in (0, 1) for n in names(t, "host", f"device {d} driver")]
    for what in ("submit", "wait"):
        got = sorted(n for n in drv if n.startswith(f"{what} micro-batch"))
        expect(got == sorted(f"{what} micro-batch {i}" for i in range(j["micro_batches"])), f"run: {got}")
    prog = [s for (pid, tid), spans in t["tracks"].items() if t["threads"][(pid, tid)] == "program" for s in spans]
    expect(len(prog) == j["micro_batches"] and sum(s[1] for s in prog) == j["cycles"], f"run: {prog} vs {j}")
    used = [d for d in (0, 1) if names(t, f"device {d}: ref N=16", "program")]
    expect(len(used) == len(j["per_device"]), f"run: device processes {used} vs {j['per_device']}")
    so, t = traced("gemm", "--backend", "ref", "--m", "40", "--k", "50", "--n", "40", "--devices", "2", "--json", "-q")
    j = json.loads(so)
    # Column blocks are not pinned: the device free first may take both.
    blocks = [n for d in (0, 1) for n in names(t, "host", f"device {d} driver") if n.startswith("gemm columns")]
    expect(len(blocks) == 2, f"gemm: {blocks} {t['threads']}")
    prog = [s for (pid, tid), spans in t["tracks"].items() if t["threads"][(pid, tid)] == "program" for s in spans]
    expect(len(prog) == 2 and sum(s[1] for s in prog) == j["cycles"], f"gemm: {prog} vs {j['cycles']}")
    model = os.path.join(EXAMPLES, "fashion_mnist", "reference", "digits_mlp_untrained.onnx")
    x = cli.save("x.npy", (np.load(os.path.join(DIGITS, "digits_x.npy")).astype(np.float32) / 16)[:64])
    y = cli.save("y.npy", np.load(os.path.join(DIGITS, "digits_y.npy")).astype(np.int64)[:64])
    so, t = traced("train", model, "--input", x, "--labels", y, "--output", os.path.join(cli.tmp, "o.onnx"),
                   "--backend", "ref", "--batch", "32", "--devices", "2", "--strategy", "mirrored", "--chunks", "4",
                   "-q")
    for d in (0, 1):
        drv = names(t, "host", f"device {d} driver")
        expect(any(n.startswith("backward chunk") for n in drv) and any(n.startswith("gather") for n in drv),
               f"train: device {d} driver: {drv}")
    expect(any(n.startswith("sum layer") for n in names(t, "host", "reducer")), "train: no reducer spans")
    allreduce = [s for spans in t["tracks"].values() for s in spans if s[3] == "all-reduce"]
    expect(allreduce, "train: no all-reduce spans")
    # One device track per replica, each with its own step spans and their forward/backward/update
    # phases (2 steps of 32 rows), not only the slowest replica's.
    for d in (0, 1):
        expect(names(t, f"device {d}: mirrored replica", "program") ==
               ["step 1", "forward", "backward", "update", "step 2", "forward", "backward", "update"],
               f"train: device {d} program track: {names(t, f'device {d}', 'program')}")

elif CASE == "trace_mpi":
    import shutil
    import subprocess
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        print("SKIP: no mpirun")
        sys.exit(77)
    env = mpi_env()
    model = os.path.join(EXAMPLES, "fashion_mnist", "reference", "digits_mlp_untrained.onnx")
    x = cli.save("x.npy", (np.load(os.path.join(DIGITS, "digits_x.npy")).astype(np.float32) / 16)[:64])
    y = cli.save("y.npy", np.load(os.path.join(DIGITS, "digits_y.npy")).astype(np.int64)[:64])
    for args in (["run", MODEL, "--input", TEST_X, "--devices", "2", "--batch", "64"],
                 ["train", model, "--input", x, "--labels", y, "--output", os.path.join(cli.tmp, "o.onnx"),
                  "--batch", "32", "--devices", "1", "--strategy", "mirrored", "--chunks", "4"]):
        if os.path.exists(TRACE):
            os.remove(TRACE)
        p = subprocess.run([mpirun, "-np", "2", "--oversubscribe", TPUW, *args, "--backend", "ref", "-q", "--trace",
                            TRACE], capture_output=True, text=True, timeout=280, env=env)
        if "built without MPI" in p.stderr:
            print("SKIP: tpuw is built without MPI")
            sys.exit(77)
        expect(p.returncode == 0, f"{args[0]}: exit {p.returncode}: {p.stderr}")
        try:
            t = check_trace(TRACE)
        except AssertionError as e:
            expect(False, f"{args[0]}: invalid trace: {e}")
        for r in (0, 1):
            expect(t["procs"].get(1000 * r + 1) == f"rank {r}: host", f"{args[0]}: rank {r}: {t['procs']}")
            expect(names(t, f"rank {r}: device ", "program"), f"{args[0]}: rank {r} has no device programs")
            expect(names(t, f"rank {r}: host", "main"), f"{args[0]}: rank {r} has no main track")
        if args[0] == "train":
            # Per step: the gradient exchange, then the exchange of the updated shards (docs/scaling.md).
            expect(names(t, "rank 1: host", "rank 1") == ["exchange", "exchange shards"] * 2,
                   f"{names(t, 'rank 1: host', 'rank 1')}")
        else:
            expect("rank 1: rows 179-358" in names(t, "rank 1: host", "main"), f"{names(t, 'rank 1: host', 'main')}")

elif CASE == "trace_bad_path":
    missing = os.path.join(cli.tmp, "nodir", "t.json")
    out = os.path.join(cli.tmp, "y.npy")
    for args in (["run", MODEL, "--input", TEST_X, "--backend", "ref", "--output", out],
                 ["gemm", "--backend", "ref", "--m", "4", "--k", "4", "--n", "4"]):
        rc, so, se = cli.run(*args, "--trace", missing)
        expect(rc == 2 and "--trace" in se and "does not exist" in se, f"{args}: exit {rc}: {se}")
        expect(not os.path.exists(out), "output written despite the bad --trace")
    rc, so, se = cli.run("run", MODEL, "--input", TEST_X, "--backend", "ref", "--trace", cli.tmp)
    expect(rc == 2 and "is a directory" in se, f"exit {rc}: {se}")

else:
    print("unknown case", CASE)
    sys.exit(1)
print("ok")
