#!/usr/bin/python3
"""tpuw train --devices K --strategy mirrored (docs/scaling.md), driven as a user would: the trained
file is byte-identical for K = 1, 2, 4 with the same --chunks; an injected device fault is recovered
(reported in --json, same bytes); a checkpoint written with K = 2 resumes with K = 4 to the same
bytes; bad options exit 2; 2 rtl devices == 1 ref device (skipped without rtl). Pipeline training
(--strategy pipeline, a 4-layer MLP made by examples/fashion_mnist/make_mlp.py): K = 1, 2, 4 stages
byte-identical to mirrored on one device with the same --chunks, per-device busy fractions in --json;
a K = 2 checkpoint resumes on K = 4; bad options (K > layers, --inject-fault) exit 2; 2 rtl stages ==
1 ref device. Under `mpirun -np 2 --oversubscribe` (skipped when tpuw is built without
MPI or mpirun is missing): 2 ranks x 1 and x 2 devices give the same bytes as one device, a rank whose
device fails ends every rank with that rank's error (exit 4), a rank that exits ends the job.

    mirrored_test.py TPUW CASE EXAMPLES_DIR
"""
import filecmp
import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tpuw_cli_harness import CliHarness, expect, mpi_env  # noqa: E402

TPUW, CASE, EXAMPLES = sys.argv[1], sys.argv[2], sys.argv[3]
MODEL = os.path.join(EXAMPLES, "fashion_mnist", "reference", "digits_mlp_untrained.onnx")
cli = CliHarness(TPUW, "tpuw_mirrored_")

x_all = np.load(os.path.join(EXAMPLES, "digits", "digits_x.npy")).astype(np.float32) / np.float32(16)
y_all = np.load(os.path.join(EXAMPLES, "digits", "digits_y.npy")).astype(np.int64)
X = cli.save("x.npy", x_all[:300])  # 300 rows at batch 64: the last step takes 44 rows
Y = cli.save("y.npy", y_all[:300])
HYPER = ["--batch", "64", "--lr", "0.05", "--momentum", "0.9", "--weight-decay", "1e-4", "--shuffle", "--seed", "3"]


def train(out, *extra):
    return cli.run("train", MODEL, "--input", X, "--labels", Y, "--output", out, "--backend", "ref", "-q",
                   *HYPER, *extra)


def train_ok(out, *extra):
    rc, so, se = train(out, *extra)
    expect(rc == 0, f"{extra}: exit {rc}; stderr: {se}")
    return so


def out(name):
    return os.path.join(cli.tmp, name)


if CASE == "mirrored_bits":
    for k in (1, 2, 4):
        j = json.loads(train_ok(out(f"k{k}.onnx"), "--epochs", "2", "--devices", str(k), "--chunks", "4", "--json"))
        expect(j["devices"] == k and j["chunks"] == 4 and j["chunk_rows"] == 16 and j["steps"] == 10, f"{j}")
        expect(j["gather_bytes_per_step"] > 0 and j["broadcast_bytes_per_step"] > 0 and j["recoveries"] == 0, f"{j}")
        expect(0 <= j["hidden_fraction"] <= 1 and 0 <= j["reduce_hidden_fraction"] <= 1 and j["events"] == [], f"{j}")
    expect(filecmp.cmp(out("k1.onnx"), out("k2.onnx"), shallow=False), "K=1 and K=2 differ")
    expect(filecmp.cmp(out("k1.onnx"), out("k4.onnx"), shallow=False), "K=1 and K=4 differ")

elif CASE == "mirrored_fault":
    train_ok(out("clean.onnx"), "--epochs", "2", "--devices", "2", "--chunks", "4")
    for spec in ("1:3:backward chunk 3 layer 0", "0:7:update layer 1"):
        j = json.loads(train_ok(out("fault.onnx"), "--epochs", "2", "--devices", "2", "--chunks", "4", "--json",
                                "--inject-fault", spec))
        dev, step = spec.split(":")[:2]
        expect(j["recoveries"] == 1, f"{spec}: {j}")
        expect(any(f"step {step}: device {dev} failed" in e and "reloaded from device" in e for e in j["events"]),
               f"{spec}: {j['events']}")
        expect(filecmp.cmp(out("clean.onnx"), out("fault.onnx"), shallow=False), f"{spec}: weights differ")

elif CASE == "mirrored_resume":
    train_ok(out("full.onnx"), "--epochs", "2", "--devices", "2", "--chunks", "4")
    ck = out("ck")
    train_ok(out("half.onnx"), "--epochs", "2", "--devices", "2", "--chunks", "4", "--checkpoint", ck,
             "--max-steps", "7")
    train_ok(out("resumed.onnx"), "--epochs", "2", "--devices", "4", "--chunks", "4", "--resume", ck)
    expect(filecmp.cmp(out("full.onnx"), out("resumed.onnx"), shallow=False), "resumed on K=4 != K=2 throughout")

elif CASE == "mirrored_bad_options":
    for extra, want in ((["--devices", "4", "--chunks", "2"], "a multiple of --devices 4"),
                        (["--devices", "2", "--chunks", "128"], "--chunks 128"),
                        (["--devices", "2", "--strategy", "ring"], "--strategy ring: expected mirrored or pipeline"),
                        (["--inject-fault", "0:1:forward chunk 0"], "--inject-fault needs --devices")):
        rc, so, se = train(out("bad.onnx"), *extra)
        expect(rc == 2 and want in se, f"{extra}: exit {rc}, stderr {se}")
        expect(not os.path.exists(out("bad.onnx")), f"{extra}: output written")
    rc, so, se = cli.run("train", MODEL, "--input", X, "--labels", Y, "--output", out("bad.onnx"), "--backend",
                         "host", "--devices", "2")
    expect(rc == 2 and "--devices needs a device backend" in se, f"host: exit {rc}, stderr {se}")

elif CASE.startswith("pipeline_"):
    M4 = out("mlp4.onnx")
    p = subprocess.run([sys.executable, os.path.join(EXAMPLES, "fashion_mnist", "make_mlp.py"), M4, "--sizes",
                        "64,48,32,24,10", "--seed", "1"], capture_output=True, text=True)
    expect(p.returncode == 0, f"make_mlp.py: {p.stderr}")

    def train4(out_, *extra, backend="ref"):
        return cli.run("train", M4, "--input", X, "--labels", Y, "--output", out_, "--backend", backend, "-q",
                       *HYPER, *extra)

    def train4_ok(out_, *extra):
        rc, so, se = train4(out_, *extra)
        expect(rc == 0, f"{extra}: exit {rc}; stderr: {se}")
        return so

    if CASE == "pipeline_bits":
        train4_ok(out("mirrored.onnx"), "--epochs", "2", "--devices", "1", "--chunks", "4")
        for k in (1, 2, 4):
            j = json.loads(train4_ok(out(f"p{k}.onnx"), "--epochs", "2", "--devices", str(k), "--strategy", "pipeline",
                                     "--chunks", "4", "--json"))
            expect(j["strategy"] == "pipeline" and j["devices"] == k and j["micro_batches"] == 4, f"{j}")
            expect(j["micro_rows"] == 16 and j["steps"] == 10 and len(j["stages"]) == k, f"{j}")
            layers = [lay for s in j["stages"] for lay in range(s["layers"][0], s["layers"][1] + 1)]
            expect(layers == [0, 1, 2, 3], f"stages do not cover the layers in order: {j['stages']}")
            for s in j["stages"]:
                expect(0 < s["busy_fraction"] <= 1, f"{s}")
            expect(0 <= j["bubble_fraction"] < 1, f"{j}")
            expect((j["boundary_bytes_per_step"] > 0) == (k > 1), f"{j}")
            expect(filecmp.cmp(out("mirrored.onnx"), out(f"p{k}.onnx"), shallow=False),
                   f"pipeline K={k} != mirrored on one device")
        so = train4_ok(out("human.onnx"), "--max-steps", "2", "--devices", "2", "--strategy", "pipeline", "--chunks",
                       "4")
        expect("pipeline on 2 devices, 4 micro-batches of 16 rows: device 0 layers 0-" in so and "bubble" in so, so)
    elif CASE == "pipeline_resume":
        train4_ok(out("full.onnx"), "--epochs", "2", "--devices", "2", "--strategy", "pipeline", "--chunks", "4")
        ck = out("ck")
        train4_ok(out("half.onnx"), "--epochs", "2", "--devices", "2", "--strategy", "pipeline", "--chunks", "4",
                  "--checkpoint", ck, "--max-steps", "7")
        train4_ok(out("resumed.onnx"), "--epochs", "2", "--devices", "4", "--strategy", "pipeline", "--chunks", "4",
                  "--resume", ck)
        expect(filecmp.cmp(out("full.onnx"), out("resumed.onnx"), shallow=False), "resumed on K=4 != K=2 throughout")
    elif CASE == "pipeline_bad_options":
        for extra, want in ((["--devices", "5"], "--devices 5 --strategy pipeline: the model has 4 layers"),
                            (["--devices", "2", "--chunks", "65"], "--chunks 65"),
                            (["--devices", "2", "--inject-fault", "0:1:forward chunk 0"],
                             "pipeline training does not recover from device faults")):
            rc, so, se = train4(out("bad.onnx"), "--strategy", "pipeline", *extra)
            expect(rc == 2 and want in se, f"{extra}: exit {rc}, stderr {se}")
            expect(not os.path.exists(out("bad.onnx")), f"{extra}: output written")
    elif CASE == "pipeline_rtl":
        # 3 steps on 2 rtl stages == 1 ref device, byte for byte.
        train4_ok(out("ref.onnx"), "--max-steps", "3", "--devices", "1", "--chunks", "4")
        rc, so, se = train4(out("rtl.onnx"), "--max-steps", "3", "--devices", "2", "--strategy", "pipeline",
                            "--chunks", "4", backend="rtl")
        if rc == 2 and "not available in this build" in se:
            print("SKIP: the rtl backend is not built")
            sys.exit(77)
        expect(rc == 0, f"exit {rc}; stderr: {se}")
        expect(filecmp.cmp(out("ref.onnx"), out("rtl.onnx"), shallow=False), "2 rtl stages != 1 ref device")
    else:
        sys.exit(f"unknown case {CASE}")

elif CASE == "mirrored_rtl":
    # One short check on the verilated device: 3 steps on 2 rtl devices == 1 ref device, byte for byte.
    train_ok(out("ref.onnx"), "--max-steps", "3", "--devices", "1", "--chunks", "4")
    rc, so, se = cli.run("train", MODEL, "--input", X, "--labels", Y, "--output", out("rtl.onnx"), "--backend", "rtl",
                         "-q", *HYPER, "--max-steps", "3", "--devices", "2", "--chunks", "4")
    if rc == 2 and "not available in this build" in se:
        print("SKIP: the rtl backend is not built")
        sys.exit(77)
    expect(rc == 0, f"exit {rc}; stderr: {se}")
    expect(filecmp.cmp(out("ref.onnx"), out("rtl.onnx"), shallow=False), "2 rtl devices != 1 ref device")

elif CASE.startswith("mpi_"):
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        print("SKIP: no mpirun")
        sys.exit(77)
    env = mpi_env()

    def mpi(np_, out_, *extra):
        t0 = time.monotonic()
        p = subprocess.run([mpirun, "-np", str(np_), "--oversubscribe", TPUW, "train", MODEL, "--input", X, "--labels",
                            Y, "--output", out_, "--backend", "ref", "-q", *HYPER, "--epochs", "2", "--chunks", "4",
                            *extra], capture_output=True, text=True, timeout=280, env=env)
        if "built without MPI" in p.stderr:
            print("SKIP: tpuw is built without MPI")
            sys.exit(77)
        return p.returncode, p.stdout, p.stderr, time.monotonic() - t0

    train_ok(out("one.onnx"), "--epochs", "2", "--devices", "1", "--chunks", "4")
    if CASE == "mpi_bits":
        for k in (1, 2):
            rc, so, se, _ = mpi(2, out(f"p2k{k}.onnx"), "--devices", str(k), "--json")
            expect(rc == 0, f"K={k}: exit {rc}; stderr: {se}")
            j = json.loads(so)
            expect(j["ranks"] == 2 and j["devices"] == k and j["exchange_bytes_per_step"] > 0, f"{j}")
            # The global batch's MACs over every replica of every rank: a fraction of the peak.
            expect(0 < j["utilization"] <= 1, f"utilization {j['utilization']} with 2 ranks x {k} devices")
            expect("rank 1 of 2: 10 steps" in se, f"rank 1 did not report: {se}")
            expect(filecmp.cmp(out("one.onnx"), out(f"p2k{k}.onnx"), shallow=False), f"2 ranks x {k} != one device")
    elif CASE == "mpi_rank_error":
        rc, so, se, _ = mpi(2, out("err.onnx"), "--devices", "1", "--inject-fault", "0:3:backward chunk 3 layer 0")
        expect(rc == 4, f"exit {rc}; stderr: {se}")
        # Every rank learns of it in the same exchange; mpirun may kill a rank before it prints once
        # another has exited non-zero: at least one report, and no other error.
        want = "tpuw: error: rank 1: mirrored training, step 3: device 0 failed"
        expect(se.count(want) >= 1 and se.count("tpuw: error:") == se.count(want), f"the ranks name rank 1's failure: {se}")
        expect(not os.path.exists(out("err.onnx")), "output written")
    elif CASE == "mpi_rank_exit":
        rc, so, se, dt = mpi(2, out("exit.onnx"), "--devices", "1", "--mpi-timeout", "20", "--inject-fault",
                             "0:3:exit:backward chunk 3 layer 0")
        expect(rc != 0 and dt < 60, f"exit {rc} after {dt:.1f} s; stderr: {se}")
        expect(not os.path.exists(out("exit.onnx")), "output written")
    elif CASE == "mpi_input_mismatch":
        # Issue 29: a rank given another file of the same shape trained on mixed data. Each rank
        # gets its own files through a shell wrapper ($OMPI_COMM_WORLD_RANK); the ranks compare
        # hashes before the first step and refuse a difference, naming the ranks (exit 2).
        x1 = x_all[:300].copy()
        x1[17, 5] += np.float32(0.25)  # one value of one row
        cli.save("x_r0.npy", x_all[:300])
        cli.save("x_r1.npy", x1)
        cli.save("y_r0.npy", y_all[:300])
        cli.save("y_r1.npy", np.roll(y_all[:300], 1))
        cli.save("x_copy_r0.npy", x_all[:300])
        cli.save("x_copy_r1.npy", x_all[:300])
        cli.save("ysame_r0.npy", y_all[:300])
        cli.save("ysame_r1.npy", y_all[:300])
        shutil.copy(MODEL, out("model_r0.onnx"))
        shutil.copy(MODEL, out("model_r1.onnx"))

        def per_rank(out_, xname, yname):
            script = ('r=$OMPI_COMM_WORLD_RANK; exec "$0" train "$1/model_r$r.onnx" --input "$1/' + xname +
                      '_r$r.npy" --labels "$1/' + yname + '_r$r.npy" "${@:2}"')
            p = subprocess.run([mpirun, "-np", "2", "--oversubscribe", "bash", "-c", script, TPUW, cli.tmp, "--output",
                                out_, "--backend", "ref", "-q", *HYPER, "--epochs", "2", "--chunks", "4", "--devices",
                                "1"], capture_output=True, text=True, timeout=280, env=env)
            return p.returncode, p.stdout, p.stderr

        def refused(xname, yname, want):
            rc, so, se = per_rank(out("mix.onnx"), xname, yname)
            expect(rc == 2 and want in se and "and rank 1 (" in se, f"{xname}/{yname}: exit {rc}: {se}")
            expect(not os.path.exists(out("mix.onnx")), f"{xname}/{yname}: output written")

        refused("x", "ysame", "--input differs between rank 0")  # the example
        refused("x_copy", "y", "--labels differs between rank 0")
        p = subprocess.run([sys.executable, os.path.join(EXAMPLES, "fashion_mnist", "make_mlp.py"), out("model_r1.onnx"),
                            "--sizes", "64,32,10", "--seed", "9"], capture_output=True, text=True)
        expect(p.returncode == 0, f"make_mlp.py: {p.stderr}")
        refused("x_copy", "ysame", "the model differs between rank 0")
        # The same values under other file names on each rank are accepted: the same bytes as one device.
        shutil.copy(MODEL, out("model_r1.onnx"))
        rc, so, se = per_rank(out("same.onnx"), "x_copy", "ysame")
        expect(rc == 0, f"same data under other names: exit {rc}: {se}")
        expect(filecmp.cmp(out("one.onnx"), out("same.onnx"), shallow=False), "2 ranks != one device")
    else:
        sys.exit(f"unknown case {CASE}")

else:
    sys.exit(f"unknown case {CASE}")
