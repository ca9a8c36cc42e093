#!/usr/bin/python3
"""Crash consistency of `tpuw train --checkpoint DIR` (issue 29, docs/training.md "Checkpoint
format"): the run is killed with SIGKILL at random instants, --resume finishes it, and the trained
file is byte-identical to an uninterrupted run.

    kill9_test.py TPUW MODEL EXAMPLES_DIR [--kills N] [--seed S] [--json REPORT]

MODEL: mlp (the digits MLP on the ref device), cnn (the PyTorch-exported poolnet CNN on the ref
device), mirrored (the MLP mirrored on 2 devices), mpi (the MLP under `mpirun -np 2`, one device
per rank; skipped, exit 77, without mpirun or MPI).

One chain: start the run with --checkpoint CK (and --resume CK once CK holds a checkpoint), kill
it, start again, ... until a run finishes; its trained file must equal the uninterrupted run's.
After every kill a copy of CK is resumed to the end too and compared (every kill is checked, not
only the last of a chain). Kill instants: half uniformly random over the run, half the moment a
checkpoint write is seen in CK (a temporary file or a new generation's file appears), so many
kills land inside a save. Every fourth kill, the copy's newest generation is also damaged (the
manifest torn in half, or a tensor file truncated or one bit flipped: what a power loss or a bad
disk leaves, which SIGKILL alone cannot) and the resume must say it falls back to the previous
generation and still give the same bytes.

mpi: one rank (chosen at random) is killed at a random instant; the job must end within
--mpi-timeout plus a margin with the killed rank named, and a resume (mpirun again) from what CK
holds must give the same bytes.

Prints one line per kill and a summary (kills, where they landed, fallbacks, mismatches); exits 1
on any mismatch or unexpected exit. Everything is written under one temporary directory, removed
at the end.
"""
import argparse
import collections
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
from tpuw_cli_harness import mpi_env  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("tpuw")
ap.add_argument("model", choices=["mlp", "cnn", "mirrored", "mpi"])
ap.add_argument("examples")
ap.add_argument("--kills", type=int, default=6)
ap.add_argument("--seed", type=int, default=29)
ap.add_argument("--json", default="")
args = ap.parse_args()
rng = random.Random(args.seed)
# In /dev/shm when there is one: SIGKILL loses no page cache, so what a kill leaves does not depend
# on fsync, and the hundreds of fsyncs of --checkpoint-every 1 would otherwise dominate the time
# (the power-loss half, data not yet on the disk, is what the damaged-generation resumes stand for).
SHM = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
TMP = tempfile.mkdtemp(prefix="tpuw_kill9_", dir=SHM)
EX = args.examples
failures = []


def path(*p):
    return os.path.join(TMP, *p)


# ---- the model, the data, the options -------------------------------------------------------------
x_all = np.load(os.path.join(EX, "digits", "digits_x.npy")).astype(np.float32) / np.float32(16)
y_all = np.load(os.path.join(EX, "digits", "digits_y.npy")).astype(np.int64)
MLP = os.path.join(EX, "fashion_mnist", "reference", "digits_mlp_untrained.onnx")
CNN = os.path.join(EX, "..", "tests", "unit", "training", "data", "cnn_step", "poolnet.onnx")
if args.model == "cnn":
    rows, model = 96, CNN
    np.save(path("x.npy"), x_all[:rows].reshape(-1, 1, 8, 8))
    extra = ["--batch", "16", "--epochs", "2", "--lr", "0.1", "--momentum", "0.9"]
else:
    rows, model = 160, MLP
    np.save(path("x.npy"), x_all[:rows])
    extra = ["--batch", "32", "--epochs", "2", "--lr", "0.05", "--momentum", "0.9", "--weight-decay", "1e-4",
             "--shuffle", "--seed", "3"]
    if args.model == "mirrored":
        extra += ["--devices", "2", "--strategy", "mirrored", "--chunks", "4"]
    if args.model == "mpi":
        extra += ["--devices", "1", "--chunks", "4", "--mpi-timeout", "10"]
np.save(path("y.npy"), y_all[:rows])
BASE = ["train", model, "--input", path("x.npy"), "--labels", path("y.npy"), "--backend", "ref", "-q", *extra]
MPIRUN = shutil.which("mpirun")
if args.model == "mpi" and MPIRUN is None:
    print("SKIP: no mpirun")
    sys.exit(77)


def cmd(out, ck=None, resume=False):
    c = [args.tpuw, *BASE, "--output", out]
    if ck is not None:
        c += ["--checkpoint", ck, "--checkpoint-every", "1"]
        if resume:
            c += ["--resume", ck]
    if args.model == "mpi":
        c = [MPIRUN, "-np", "2", "--oversubscribe", *c]
    return c


def run(c, timeout=280):
    p = subprocess.run(c, capture_output=True, text=True, timeout=timeout,
                       env=mpi_env() if args.model == "mpi" else None)
    if args.model == "mpi" and "built without MPI" in p.stderr:
        print("SKIP: tpuw is built without MPI")
        sys.exit(77)
    return p


def has_checkpoint(ck):
    return os.path.exists(os.path.join(ck, "manifest.json")) or os.path.exists(os.path.join(ck, "manifest.prev.json"))


def same(a, b):
    with open(a, "rb") as fa, open(b, "rb") as fb:
        return fa.read() == fb.read()


def where(ck):
    """Where in the checkpoint cycle the kill landed, from what CK holds."""
    if not os.path.isdir(ck):
        return "before the first checkpoint"
    names = os.listdir(ck)
    gens = [int(m.group(1)) for m in (re.match(r"g(\d+)-", n) for n in names) if m]
    try:
        cur = json.load(open(os.path.join(ck, "manifest.json")))["generation"]
    except (OSError, ValueError, KeyError):
        cur = None
    try:
        prev = json.load(open(os.path.join(ck, "manifest.prev.json")))["generation"]
    except (OSError, ValueError, KeyError):
        prev = None
    if any(n.startswith(".") and ".tmp-" in n for n in names):
        return "inside a save: a temporary file was being written"
    if cur is None:
        return "inside the first save: no manifest yet" if gens else "before the first checkpoint"
    if gens and max(gens) > cur:
        return "inside a save: new generation's tensors written, manifest not yet replaced"
    if prev is not None and cur - prev > 1:
        return "inside a save: new manifest committed, previous manifest not yet updated"
    if len(set(gens)) > 2:
        return "inside a save: new manifest committed, old files not yet removed"
    return "between saves"


def watch_and_kill(proc, ck, mode, t_kill):
    """Kills proc (SIGKILL) at t_kill seconds, or (mode 'save') as soon as CK shows a save in flight;
    returns the seconds it ran, or None when it ended by itself first."""
    t0 = time.monotonic()
    seen = set(os.listdir(ck)) if os.path.isdir(ck) else set()
    while proc.poll() is None:
        now = time.monotonic() - t0
        if mode == "time" and now >= t_kill:
            break
        if mode == "save":
            try:
                names = set(os.listdir(ck))
            except OSError:
                names = set()
            fresh = names - seen
            if any(n.startswith(".") or re.match(r"g\d+-", n) for n in fresh) and now >= t_kill:
                break
            seen |= names
            time.sleep(0.0005)
        else:
            time.sleep(0.001)
        if now > 120:
            break
    if proc.poll() is not None:
        return None
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    return time.monotonic() - t0


def damage(ck):
    """Damages the newest generation of CK as a power loss or a bad disk might; returns how."""
    m = json.load(open(os.path.join(ck, "manifest.json")))
    how = rng.choice(["torn manifest", "truncated tensor", "flipped bit"])
    if how == "torn manifest":
        p = os.path.join(ck, "manifest.json")
        data = open(p, "rb").read()
        open(p, "wb").write(data[:len(data) // 2])
    else:
        p = os.path.join(ck, rng.choice(m["params"] + m["momentum"])["file"])
        data = bytearray(open(p, "rb").read())
        if how == "truncated tensor":
            data = data[:rng.randrange(len(data))]
        else:
            i = rng.randrange(128, len(data))
            data[i] ^= 1 << rng.randrange(8)
        open(p, "wb").write(bytes(data))
    return how


# ---- the uninterrupted run (no checkpoints), and one with checkpoints that times the kills ----------
REF = path("reference.onnx")
p = run(cmd(REF))
if p.returncode != 0:
    print(f"FAIL: the uninterrupted run: exit {p.returncode}: {p.stderr}")
    sys.exit(1)
t0 = time.monotonic()
p = run(cmd(path("timed.onnx"), path("timed_ck")))
T = time.monotonic() - t0
if p.returncode != 0 or not same(path("timed.onnx"), REF):
    print(f"FAIL: the uninterrupted run with --checkpoint: exit {p.returncode}: {p.stderr}")
    sys.exit(1)
shutil.rmtree(path("timed_ck"))
print(f"{args.model}: uninterrupted run with a checkpoint every step {T:.2f} s; {args.kills} kills, seed {args.seed}")

stats = collections.Counter()
kills = 0

if args.model == "mpi":
    # Kill one rank; the job must end in time naming it; resume from CK.
    chain = 0
    while kills < args.kills:
        chain += 1
        ck, out = path(f"ck{chain}"), path(f"out{chain}.onnx")
        proc = subprocess.Popen(cmd(out, ck, has_checkpoint(ck)), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env=mpi_env())
        t_kill = rng.uniform(0.2, T * 0.9)
        time.sleep(t_kill)
        # The ranks: mpirun's children that are tpuw, with their rank from the environment.
        ranks = {}
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                st = open(f"/proc/{pid}/stat").read()
                ppid = int(st.rsplit(")", 1)[1].split()[1])
                if ppid != proc.pid:
                    continue
                env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
                r = [e for e in env if e.startswith(b"OMPI_COMM_WORLD_RANK=")]
                if r:
                    ranks[int(r[0].split(b"=")[1])] = int(pid)
            except (OSError, ValueError, IndexError):
                continue
        if proc.poll() is not None or not ranks:
            proc.communicate()
            stats["the job ended before the kill"] += 1
            continue
        victim = rng.choice(sorted(ranks))
        os.kill(ranks[victim], signal.SIGKILL)
        t1 = time.monotonic()
        try:
            so, se = proc.communicate(timeout=10 + 30)
        except subprocess.TimeoutExpired:
            proc.kill()
            so, se = proc.communicate()
            failures.append(f"kill {kills + 1}: the job did not end within --mpi-timeout 10 + 30 s")
        dt = time.monotonic() - t1
        kills += 1
        named = re.search(rf"rank {victim}\b", se) is not None
        stats[f"job ended after the kill of rank {victim}, rank named: {named}"] += 1
        if proc.returncode == 0 or not named:
            failures.append(f"kill {kills}: rank {victim}: exit {proc.returncode}, named {named}: {se[-2000:]}")
        state = where(ck)
        stats[state] += 1
        p = run(cmd(out, ck, has_checkpoint(ck)))
        ok = p.returncode == 0 and same(out, REF)
        print(f"kill {kills}: rank {victim} at {t_kill:.2f} s, the job ended {dt:.2f} s later (exit {proc.returncode}); "
              f"{state}; resume {'identical' if ok else 'DIFFERENT'}")
        if not ok:
            failures.append(f"kill {kills}: resume exit {p.returncode}, same bytes {p.returncode == 0 and same(out, REF)}:"
                            f" {p.stderr[-2000:]}")
        stats["identical after resume" if ok else "MISMATCH after resume"] += 1
else:
    chain = 0
    while kills < args.kills:
        chain += 1
        ck, out = path(f"ck{chain}"), path(f"out{chain}.onnx")
        runs = 0
        while True:
            runs += 1
            started = time.monotonic()
            proc = subprocess.Popen(cmd(out, ck, has_checkpoint(ck)), stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE)
            mode = "time" if kills >= args.kills or rng.random() < 0.5 else "save"
            t_kill = rng.uniform(0, T * 0.95) if mode == "time" else rng.uniform(0, T * 0.8)
            if kills >= args.kills:
                t_kill = 1e9  # enough kills: let the chain finish
            ran = watch_and_kill(proc, ck, mode, t_kill)
            if ran is None:
                so, se = proc.communicate()
                if runs == 1:  # a whole run: follow the machine's load (kill instants scale with T)
                    T = 0.5 * T + 0.5 * (time.monotonic() - started)
                if proc.returncode != 0:
                    failures.append(f"chain {chain} run {runs}: exit {proc.returncode}: {se.decode()[-2000:]}")
                    break
                ok = same(out, REF)
                stats["chains finished, identical" if ok else "chains finished, MISMATCH"] += 1
                print(f"chain {chain}: finished after {runs - 1} kills, {'identical' if ok else 'DIFFERENT'}")
                if not ok:
                    failures.append(f"chain {chain}: the finished run's output differs")
                break
            proc.communicate()
            kills += 1
            state = where(ck)
            stats[f"{mode} kill: {state}"] += 1
            # Every kill checked: a copy of CK resumed to the end gives the same bytes.
            vck, vout = path("verify_ck"), path("verify.onnx")
            shutil.rmtree(vck, ignore_errors=True)
            if os.path.isdir(ck):
                shutil.copytree(ck, vck)
            damaged = ""
            if kills % 4 == 0 and os.path.exists(os.path.join(vck, "manifest.json")) and \
                    os.path.exists(os.path.join(vck, "manifest.prev.json")):
                damaged = damage(vck)
                stats[f"damaged: {damaged}"] += 1
            p = run(cmd(vout, vck, has_checkpoint(vck)))
            fell_back = "resuming from the previous one" in p.stderr
            ok = p.returncode == 0 and same(vout, REF) and (fell_back or not damaged) and (damaged or not fell_back)
            print(f"kill {kills} ({mode}, {ran:.2f} s into run {runs} of chain {chain}): {state}"
                  f"{'; damaged: ' + damaged if damaged else ''}; resume "
                  f"{'identical' if ok else 'FAILED'}{' (fell back to the previous generation)' if fell_back else ''}")
            if fell_back:
                stats["resumes that fell back to the previous generation"] += 1
            stats["identical after resume" if ok else "FAILED after resume"] += 1
            if not ok:
                failures.append(f"kill {kills}: resume exit {p.returncode}, fell back {fell_back}, damaged "
                                f"{damaged!r}: {p.stderr[-2000:]}")
            if os.path.exists(vout):
                os.remove(vout)

print(f"{args.model}: {kills} kills")
for k, v in sorted(stats.items()):
    print(f"  {v:4d}  {k}")
if args.json:
    with open(args.json, "w") as f:
        json.dump({"model": args.model, "kills": kills, "seed": args.seed, "outcomes": dict(stats),
                   "failures": failures}, f, indent=2)
shutil.rmtree(TMP, ignore_errors=True)
if failures:
    for f in failures:
        print("FAIL:", f)
    sys.exit(1)
print("ok")
