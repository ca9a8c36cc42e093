#!/usr/bin/python3
"""Output files of every tpuw subcommand (issue 29, item 1) and the CLI-side classes of item 2.

Every output path (--out, --output/-o, --trace, --wave, --checkpoint, .dump files, out.NAME.npy) is
checked before any work: a directory, device, FIFO, socket, a link to one or to nothing, a missing
or unwritable directory is refused with exit 2 and left exactly as it was. Outputs are staged and
renamed into place only when the command succeeds; on any non-zero exit no output appears and no
temporary is left. --wave writes through a private directory (Verilator's FST writer unlinks the
name it is given), refuses a file size limit it cannot survive, and never dies of SIGBUS.
Every test touches only its own temporary directory (device nodes are made there with mknod).

    outputs_test.py TPUW CASE EXAMPLES_DIR FIRMWARE_DIR
"""
import json
import os
import resource
import signal
import socket
import stat
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tpuw_cli_harness import CliHarness, expect  # noqa: E402

TPUW, CASE, EXAMPLES, FIRMWARE = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
cli = CliHarness(TPUW, "tpuw_outputs_")
TMP = cli.tmp
DIGITS = os.path.join(EXAMPLES, "digits")
MODEL = os.path.join(DIGITS, "digits_mlp.onnx")
TEST_X = os.path.join(DIGITS, "test_x.npy")
TRAIN_MODEL = os.path.join(EXAMPLES, "fashion_mnist", "reference", "digits_mlp_untrained.onnx")
TRAIN_X = cli.save("train_x.npy", (np.load(os.path.join(DIGITS, "digits_x.npy"))[:300] / 16).astype(np.float32))
TRAIN_Y = cli.save("train_y.npy", np.load(os.path.join(DIGITS, "digits_y.npy"))[:300].astype(np.int64))
TRAIN = ["train", TRAIN_MODEL, "--input", TRAIN_X, "--labels", TRAIN_Y, "--backend", "ref", "--batch", "64",
         "--max-steps", "2", "-q"]


def listing():
    """Every entry under TMP (recursively), to show that nothing was added or left behind."""
    out = []
    for root, dirs, files in os.walk(TMP):
        for n in dirs + files:
            out.append(os.path.relpath(os.path.join(root, n), TMP))
    return sorted(out)


def rtl_built():
    rc, so, se = cli.run("info", "--backend", "rtl", "--json")
    return rc == 0


def special_files():
    """A character device (a copy of /dev/null's node, made here), a FIFO, a socket, a directory, a
    link to the device, a link to nothing: name -> path."""
    d = os.path.join(TMP, "special")
    os.makedirs(d, exist_ok=True)
    files = {}
    dev = os.path.join(d, "null_dev")
    if not os.path.exists(dev):
        try:
            os.mknod(dev, 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # what /dev/null is, but ours
        except PermissionError:
            dev = None
    if dev:
        files["device"] = dev
    fifo = os.path.join(d, "fifo")
    if not os.path.exists(fifo):
        os.mkfifo(fifo)
    files["fifo"] = fifo
    sock = os.path.join(d, "sock")
    if not os.path.exists(sock):
        s = socket.socket(socket.AF_UNIX)
        s.bind(sock)
        s.close()
    files["socket"] = sock
    sub = os.path.join(d, "dir")
    os.makedirs(sub, exist_ok=True)
    files["directory"] = sub
    link = os.path.join(d, "link_to_fifo")
    if not os.path.lexists(link):
        os.symlink(fifo, link)
    files["link to a FIFO"] = link
    dangling = os.path.join(d, "dangling")
    if not os.path.lexists(dangling):
        os.symlink(os.path.join(d, "nothing"), dangling)
    files["link to nothing"] = dangling
    return files


def snapshot(path):
    st = os.lstat(path)
    return (st.st_mode, st.st_ino, st.st_rdev, os.readlink(path) if stat.S_ISLNK(st.st_mode) else None)


def refused(args, path, needle=None, rc_want=2, timeout_s=None):
    """`tpuw args` exits rc_want quickly with `path` named, and `path` (if it exists) is unchanged."""
    before = snapshot(path) if os.path.lexists(path) else None
    entries = listing()
    t0 = time.monotonic()
    rc, so, se = cli.run(*args)
    dt = time.monotonic() - t0
    expect(rc == rc_want, f"{args}: exit {rc}, expected {rc_want}: {se}")
    expect(path in se, f"{args}: the message does not name {path}: {se}")
    if needle:
        expect(needle in se, f"{args}: {needle!r} not in {se}")
    if before is not None:
        expect(snapshot(path) == before, f"{args}: {path} was changed")
    expect(listing() == entries, f"{args}: files added or left: {sorted(set(listing()) ^ set(entries))}")
    if timeout_s is not None:
        expect(dt < timeout_s, f"{args}: refused only after {dt:.1f} s (after the work, not before)")
    return se


def run_limited(args, fsize, timeout=240):
    """tpuw args with RLIMIT_FSIZE = fsize bytes and SIGXFSZ ignored (`trap '' XFSZ; ulimit -f`)."""
    def limit():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
    p = subprocess.run([TPUW, *args], capture_output=True, text=True, preexec_fn=limit, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


if CASE == "wave_special_files":
    # HIGH: `gemm --wave /dev/full` as root replaced the device node with a regular file. Here with
    # nodes of our own: every special file, and a link to one, is refused with exit 2, untouched.
    if not rtl_built():
        print("SKIP: no rtl backend")
        sys.exit(77)
    for kind, path in special_files().items():
        needle = "is a directory" if kind == "directory" else None
        refused(["gemm", "--m", "16", "--k", "16", "--n", "16", "--wave", path, "-q"], path, needle)
        refused(["exec", os.path.join(FIRMWARE, "gemm_n4.s"), "--wave", path], path, needle)
    # The refusal names what the path is.
    files = special_files()
    if "device" in files:
        refused(["gemm", "--m", "16", "--k", "16", "--n", "16", "--wave", files["device"]], files["device"],
                "is a character device")
    refused(["gemm", "--m", "16", "--k", "16", "--n", "16", "--wave", files["fifo"]], files["fifo"], "FIFO")
    # A missing directory: exit 2 (it was 1 for --wave), as for --out and --trace.
    miss = os.path.join(TMP, "no", "w.fst")
    refused(["gemm", "--m", "16", "--k", "16", "--n", "16", "--wave", miss], miss, "does not exist")

elif CASE == "wave_atomic":
    # --wave writes a complete FST file through a private directory: no NAME.hier or temporary left,
    # a previous file replaced only on success, a link to a regular file keeps being a link.
    if not rtl_built():
        print("SKIP: no rtl backend")
        sys.exit(77)
    w = os.path.join(TMP, "w.fst")
    cli.run_ok("gemm", "--m", "16", "--k", "16", "--n", "16", "--wave", w, "-q")
    data = open(w, "rb").read()
    expect(len(data) > 100 and data[0] == 0, f"not an FST file ({len(data)} bytes)")  # FST_BL_HDR = 0
    expect([n for n in listing() if not n.startswith("train_")] == ["w.fst"], f"entries: {listing()}")
    # Replaced through a link: the link stays, the file it names is the new waveform.
    target = cli.write("target.fst", b"old")
    link = os.path.join(TMP, "link.fst")
    os.symlink(target, link)
    cli.run_ok("exec", os.path.join(FIRMWARE, "gemm_n4.s"), "--wave", link)
    expect(os.path.islink(link) and os.readlink(link) == target, "the link was replaced")
    expect(open(target, "rb").read()[:1] == b"\x00" and os.path.getsize(target) > 100, "target not rewritten")
    # A run that fails (a device fault, exit 4): the old waveform stays as it was, nothing is left.
    old = cli.write("old.fst", b"old waveform")
    src = os.path.join(TMP, "fault.s")
    with open(src, "w") as f:
        f.write(".array_n 4\nnop\n.word 0xee 0 0 0\nnop\n")  # an illegal opcode: a device fault
    entries = listing()
    rc, so, se = cli.run("exec", src, "--wave", old)
    expect(rc == 4, f"fault: exit {rc}: {se}")
    expect(open(old, "rb").read() == b"old waveform", "old waveform changed by a failed exec")
    expect(listing() == entries, f"left behind: {sorted(set(listing()) ^ set(entries))}")

elif CASE == "wave_size_limit":
    # `trap '' XFSZ; ulimit -f 2; tpuw gemm --m 64 --k 64 --n 64 --wave out/w.fst` died of SIGBUS
    # (exit 135) and left w.fst and w.fst.hier. Now: a clear error, exit 1, nothing left.
    if not rtl_built():
        print("SKIP: no rtl backend")
        sys.exit(77)
    out = os.path.join(TMP, "out")
    os.makedirs(out)
    w = os.path.join(out, "w.fst")
    for fsize in (2 * 1024, 1 << 20, (64 << 20) - 1):  # the 2 blocks, 1 MiB, just under the floor
        rc, so, se = run_limited(["gemm", "--m", "64", "--k", "64", "--n", "64", "--wave", w, "-q"], fsize)
        expect(rc == 1, f"ulimit {fsize}: exit {rc} (SIGBUS is 135 / -7): {se}")
        expect("file size limit" in se and w in se, f"ulimit {fsize}: {se}")
        expect(os.listdir(out) == [], f"ulimit {fsize}: left {os.listdir(out)}")
    # A SIGBUS inside the FST writer (a mapping past the end of a file that could not grow): the
    # handler removes the staged waveform and exits 1 with a message, instead of dying with a core.
    p = subprocess.Popen([TPUW, "gemm", "--m", "512", "--k", "512", "--n", "512", "--wave", w, "-q"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    t0 = time.monotonic()
    while not any(n.startswith(".w.fst.tpuw-") for n in os.listdir(out)) and time.monotonic() - t0 < 60:
        time.sleep(0.05)
    time.sleep(0.5)  # the writer has created its files
    staged = [n for n in os.listdir(out) if n.startswith(".w.fst.tpuw-")]
    expect(staged and os.listdir(os.path.join(out, staged[0])), f"no staged waveform: {os.listdir(out)}")
    p.send_signal(signal.SIGBUS)
    so, se = p.communicate(timeout=60)
    expect(p.returncode == 1 and "SIGBUS" in se and "no waveform was written" in se, f"exit {p.returncode}: {se}")
    expect(os.listdir(out) == [], f"SIGBUS: left {os.listdir(out)}")
    # An existing waveform is kept as it was.
    old = cli.write("out/w.fst", b"old")
    rc, so, se = run_limited(["gemm", "--m", "16", "--k", "16", "--n", "16", "--wave", old, "-q"], 4096)
    expect(rc == 1 and open(old, "rb").read() == b"old" and os.listdir(out) == ["w.fst"], f"exit {rc}: {se}")

elif CASE == "outputs_special_files":
    # Every output option of every subcommand refuses a directory, device, FIFO, socket, a link to
    # one or to nothing with exit 2, before any work, and leaves it as it was.
    src = os.path.join(FIRMWARE, "gemm_n4.s")
    for kind, path in special_files().items():
        needle = "is a directory" if kind == "directory" else None
        refused(["gemm", "--backend", "ref", "--m", "8", "--k", "8", "--n", "8", "--out", path, "-q"], path, needle)
        refused(["gemm", "--backend", "ref", "--m", "8", "--k", "8", "--n", "8", "--trace", path, "-q"], path, needle)
        refused(["asm", src, "-o", path], path, needle)
        refused(["run", MODEL, "--input", TEST_X, "--backend", "ref", "--output", path, "-q"], path, needle)
        refused(["run", MODEL, "--input", TEST_X, "--backend", "ref", "--trace", path, "-q"], path, needle)
        refused([*TRAIN, "-o", path], path, needle)
        refused([*TRAIN, "-o", os.path.join(TMP, "m.onnx"), "--trace", path], path, needle)
        # A .dump file of exec (beside the program).
        prog = os.path.join(TMP, "special", "dump.s")
        with open(prog, "w") as f:
            f.write(".array_n 4\n.zero out 0x1000 16\n.dump out 0x1000 16 int8 16 {}\nnop\n".format(
                os.path.basename(path)))
        refused(["exec", prog, "--backend", "ref"], path, needle)
        os.remove(prog)
    # /dev/full and /dev/null by name: refused (exit 2), never written or replaced.
    refused(["asm", src, "-o", "/dev/full"], "/dev/full", "is a character device")
    refused(["gemm", "--backend", "ref", "--m", "8", "--k", "8", "--n", "8", "--out", "/dev/null", "-q"], "/dev/null")
    # --checkpoint naming a FIFO or a file is refused before training.
    files = special_files()
    refused([*TRAIN, "-o", os.path.join(TMP, "m.onnx"), "--checkpoint", files["fifo"]], files["fifo"],
            "is not a directory")

elif CASE == "outputs_checked_first":
    # Late checks: `gemm --out /proc/version` and `run --output /proc/y.npy` failed only after the
    # run; `train --trace /proc/t.json` and `run --output ... --trace` wrote the first output and
    # then failed; `train -o` into an unwritable directory failed after training. Now each is
    # refused before any work (well under the time of the run) and writes nothing.
    refused(["gemm", "--backend", "ref", "--m", "256", "--k", "256", "--n", "256", "--out", "/proc/version", "-q"],
            "/proc/version", "cannot create files in directory /proc", timeout_s=2.0)
    refused(["run", MODEL, "--input", TEST_X, "--backend", "ref", "--output", "/proc/y.npy", "-q"], "/proc/y.npy",
            "cannot create files in directory /proc", timeout_s=2.0)
    y = os.path.join(TMP, "y.npy")
    refused(["run", MODEL, "--input", TEST_X, "--backend", "ref", "--output", y, "--trace", "/proc/t.json", "-q"],
            "/proc/t.json")
    expect(not os.path.exists(y), "run wrote --output although --trace is refused")
    m = os.path.join(TMP, "m.onnx")
    refused([*TRAIN, "-o", m, "--trace", "/proc/t.json"], "/proc/t.json")
    expect(not os.path.exists(m), "train wrote the model although --trace is refused")
    refused([*TRAIN, "-o", "/proc/tpuw/m.onnx"], "/proc/tpuw/m.onnx")
    blocker = cli.write("file", b"not a directory")
    refused([*TRAIN, "-o", os.path.join(blocker, "m.onnx")], os.path.join(blocker, "m.onnx"), "is not a directory")
    refused([*TRAIN, "-o", m, "--checkpoint", "/proc/tpuw_ck"], "/proc/tpuw_ck")
    if os.geteuid() != 0:  # root writes into a 0500 directory anyway
        ro = os.path.join(TMP, "ro")
        os.makedirs(ro)
        os.chmod(ro, 0o500)
        refused([*TRAIN, "-o", os.path.join(ro, "m.onnx")], os.path.join(ro, "m.onnx"))
    # Two outputs on one file.
    refused(["gemm", "--backend", "ref", "--m", "8", "--k", "8", "--n", "8", "--out", y, "--trace", y, "-q"], y,
            "the same file as --out")

elif CASE == "outputs_all_or_nothing":
    # On a non-zero exit no output appears and an existing one keeps its contents: run with a
    # --check (exit 0: all written), exec whose .expect fails (exit 3: no .dump), train whose loss
    # diverges (exit 3: neither the model nor the trace).
    y, t = os.path.join(TMP, "y.npy"), os.path.join(TMP, "t.json")
    cli.run_ok("run", MODEL, "--input", TEST_X, "--backend", "ref", "--output", y, "--trace", t, "--check", "-q")
    expect(np.load(y).shape[0] == np.load(TEST_X).shape[0] and json.load(open(t)).get("traceEvents"), "outputs")
    prog = os.path.join(TMP, "expect.s")
    with open(prog, "w") as f:
        f.write(".array_n 4\n.int8 a 0x1000 1 2 3 4\n.dump a 0x1000 4 int8 4 dumped.bin\n"
                ".expect a 0x1000 int8 9 9 9 9\nnop\n")
    old = cli.write("dumped.bin", b"old dump")
    rc, so, se = cli.run("exec", prog, "--backend", "ref")
    expect(rc == 3 and "not written" in se, f"exec: exit {rc}: {se}")
    expect(open(old, "rb").read() == b"old dump", "the .dump file changed on a failed exec")
    with open(prog, "w") as f:
        f.write(".array_n 4\n.int8 a 0x1000 1 2 3 4\n.dump a 0x1000 4 int8 4 dumped.bin\n"
                ".expect a 0x1000 int8 1 2 3 4\nnop\n")
    cli.run_ok("exec", prog, "--backend", "ref")
    expect(open(old, "rb").read() == bytes([1, 2, 3, 4]), "the .dump file of a passing exec")
    m = cli.write("m.onnx", b"old model")
    entries = listing()
    rc, so, se = cli.run(*TRAIN[:-3], "--max-steps", "4", "--lr", "1e30", "--momentum", "0.9", "-o", m, "--trace",
                         os.path.join(TMP, "train.json"), "-q")
    expect("the loss became" in se, f"train: {se}")
    expect(rc == 3, f"train with a diverging loss: exit {rc}: {se}")
    expect(open(m, "rb").read() == b"old model" and listing() == entries, f"train left {listing()}")

elif CASE == "numeric_options":
    # `train --seed -1` and `--seed 99999999999999999999999` wrapped silently; --devices had no cap
    # (`train --devices 1000 --chunks 1000` built 1000 models). Every integer option of train is
    # checked like gemm's and run's: exit 2, the option named, nothing written.
    out = os.path.join(TMP, "m.onnx")
    for args, needle in ((["--seed", "-1"], "--seed: -1: must not be negative"),
                         (["--seed", "99999999999999999999999"], "larger than 2^64 - 1"),
                         (["--seed", "1e3"], "not an unsigned integer"),
                         (["--epochs", "99999999999999999999"], "--epochs: 99999999999999999999: outside"),
                         (["--limit", "0x10"], "--limit: 0x10: not an integer"),
                         (["--checkpoint-every", "1.5"], "not an integer"),
                         (["--array-n", "-16"], "must not be negative"),
                         (["--devices", "-1"], "must not be negative"),
                         (["--devices", "1000", "--chunks", "1000"], "--devices 1000: at most 64 devices"),
                         (["--devices", "65"], "at most 64"),
                         (["--devices", "2", "--chunks", "2000"], "--chunks 2000: at most 1024"),
                         (["--mpi-timeout", "inf"], "--mpi-timeout inf: must be finite")):
        t0 = time.monotonic()
        rc, so, se = cli.run(*TRAIN, "-o", out, *args)
        expect(rc == 2 and needle in se, f"{args}: exit {rc}: {se}")
        expect(time.monotonic() - t0 < 10, f"{args}: refused late")
        expect(not os.path.exists(out), f"{args}: output written")
    # The other subcommands' --devices: the same cap and the same refusal of a negative count.
    for args in (["info", "--backend", "ref", "--devices", "-1"], ["info", "--backend", "ref", "--devices", "65"],
                 ["gemm", "--backend", "ref", "--devices", "65"]):
        rc, so, se = cli.run(*args)
        expect(rc == 2 and "--devices" in se, f"{args}: exit {rc}: {se}")
    rc, so, se = cli.run(*TRAIN, "-o", out, "--seed", "18446744073709551615", "--shuffle")
    expect(rc == 0 and os.path.exists(out), f"the largest seed is valid: exit {rc}: {se}")

elif CASE == "npy_long_shape":
    # A .npy with 20,000 dimensions echoed its whole 60-90 KB shape in the error. Now the message
    # shows the first and last dimensions and the count.
    def many_dims(name, dims, last=1):
        shape = "(" + ", ".join(["1"] * (dims - 1) + [str(last)]) + ",)"
        header = "{'descr': '<f4', 'fortran_order': False, 'shape': %s, }" % shape
        header += " " * ((64 - (12 + len(header) + 1) % 64) % 64) + "\n"
        data = b"\x93NUMPY\x02\x00" + len(header).to_bytes(4, "little") + header.encode() + b"\0" * (4 * last)
        return cli.write(name, data)
    big = many_dims("big.npy", 20000, 65)  # 65 features: the models take 64
    for args in (["run", MODEL, "--input", big, "--backend", "ref", "-q"],
                 ["gemm", "--backend", "ref", "--a", big, "--b", big, "--dtype", "bf16", "-q"],
                 [*TRAIN[:3], big, *TRAIN[4:], "-o", os.path.join(TMP, "m.onnx")]):
        rc, so, se = cli.run(*args)
        expect(rc == 2, f"{args[0]}: exit {rc}: {se[:300]}")
        expect(len(se) < 1500, f"{args[0]}: a {len(se)}-byte message: {se[:300]}...")
        expect("(20000 dimensions)" in se, f"{args[0]}: the count is not named: {se}")
    # A shape of ten dimensions is still printed in full.
    ten = many_dims("ten.npy", 10, 3)
    rc, so, se = cli.run("gemm", "--backend", "ref", "--a", ten, "--b", ten, "--dtype", "bf16", "-q")
    expect(rc == 2 and "(1, 1, 1, 1, 1, 1, 1, 1, 1, 3)" in se, f"exit {rc}: {se}")

elif CASE == "serial_array_n":
    # The serial backend's text and --json said N=16 on an N=4 board, and --array-n 16 was accepted.
    # Now the board's ARRAY_N register is reported and a different --array-n refused (exit 2).
    os.environ["TPUW_SERIAL_PORT"] = "sim"
    rc, so, se = cli.run("info", "--backend", "serial", "--json")
    if rc != 0 and ("not available" in se or "not built" in se):
        print("SKIP: no simulated serial board in this build")
        sys.exit(77)
    expect(rc == 0 and json.loads(so)["array_n"] == 4, f"info: exit {rc}: {so} {se}")
    for args in (["info", "--backend", "serial", "--array-n", "16"],
                 ["gemm", "--backend", "serial", "--m", "4", "--k", "4", "--n", "4", "--array-n", "16", "-q"],
                 ["run", MODEL, "--input", TEST_X, "--backend", "serial", "--array-n", "16", "-q"]):
        rc, so, se = cli.run(*args)
        expect(rc == 2 and "--array-n 16" in se and "ARRAY_N 4" in se, f"{args}: exit {rc}: {se}")
    so = cli.run_ok("gemm", "--backend", "serial", "--m", "4", "--k", "4", "--n", "4", "--json", "-q")
    expect(json.loads(so)["array_n"] == 4, f"gemm --json: {so}")
    so = cli.run_ok("gemm", "--backend", "serial", "--m", "4", "--k", "4", "--n", "4", "-q")
    expect("(N=4)" in so, f"gemm text: {so}")
    so = cli.run_ok("gemm", "--backend", "serial", "--m", "4", "--k", "4", "--n", "4", "--array-n", "4", "-q")
    expect("(N=4)" in so, f"gemm --array-n 4: {so}")

else:
    print(f"unknown case {CASE}")
    sys.exit(2)
