#!/usr/bin/python3
"""Integration tests of the tpuw CLI: cli_test.py TPUW CASE FIRMWARE_DIR (exit 77 = skipped)."""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tpuw_cli_harness import CliHarness, expect  # noqa: E402

TPUW, CASE, FIRMWARE = sys.argv[1], sys.argv[2], sys.argv[3]
CLI = CliHarness(TPUW, "tpuw_cli_")
TMP = CLI.tmp
run = CLI.run
save = CLI.save


def rtl_built():
    rc, out, err = run("info", "--backend", "rtl", "--json")
    return rc == 0


def bad_input_case(a_path, b_path, needle):
    """tpuw gemm on bad input: exit 2, a message naming the file and the problem, no output file."""
    out = os.path.join(TMP, "c.npy")
    rc, so, se = run("gemm", "--backend", "ref", "--a", a_path, "--b", b_path, "--out", out)
    expect(rc == 2, f"exit code {rc}, expected 2; stderr: {se}")
    expect(needle in se, f"'{needle}' not in stderr: {se}")
    expect(not os.path.exists(out), "output written despite the error")


def good(shape, seed):
    return np.random.default_rng(seed).integers(-128, 128, size=shape, dtype=np.int8)


if CASE == "info_json":
    rc, so, se = run("info", "--backend", "ref", "--json")
    expect(rc == 0, se)
    j = json.loads(so)
    expect(j["array_n"] == 16 and j["ub_depth"] == 32768 and j["id"] == "0x54505557", so)
    # ISA 1.1 features are named (human and --json): FEATURES.TRANSPOSE (bit 4) and FEATURES.BF16 (bit 5).
    names = j["feature_names"].split()
    expect("TRANSPOSE" in names and "BF16" in names and j["features"] & 0x30 == 0x30, so)
    rc, so, se = run("info", "--backend", "ref")
    expect(rc == 0 and "TRANSPOSE BF16 LUT)" in so, so + se)
    rc, so, se = run("info", "--backend", "ref", "--array-n", "4", "--json")
    expect(rc == 0 and json.loads(so)["array_n"] == 4, so + se)

elif CASE == "gemm_check_ref":
    for m, k, n in [(1, 1, 1), (37, 70, 29), (5, 300, 3)]:
        rc, so, se = run("gemm", "--backend", "ref", "--m", str(m), "--k", str(k), "--n", str(n), "--check", "-q")
        expect(rc == 0, f"{m}x{k}x{n}: rc {rc} {se}")
        expect("utilization" in so, so)
    rc, so, se = run("gemm", "--backend", "ref", "--array-n", "4", "--m", "19", "--k", "23", "--n", "9", "--check")
    expect(rc == 0, se)

elif CASE == "gemm_bf16":
    # --dtype bf16: float32 operands rounded to bf16 (RNE), fp32 C; --check is bit for bit.
    for m, k, n, arr in [(37, 70, 29, "16"), (19, 23, 9, "4")]:
        rc, so, se = run("gemm", "--backend", "ref", "--array-n", arr, "--dtype", "bf16", "--m", str(m), "--k", str(k),
                         "--n", str(n), "--check", "--json", "-q")
        expect(rc == 0, f"{m}x{k}x{n}: rc {rc} {se}")
        j = json.loads(so)
        expect(j["dtype"] == "bf16" and j["check"]["host_model"] == "equal" and j["cycles"] > 0, so)
    rng = np.random.default_rng(5)
    a = rng.standard_normal((45, 67)).astype(np.float32)
    b = rng.standard_normal((67, 23)).astype(np.float32)
    out = os.path.join(TMP, "c_bf16.npy")
    rc, so, se = run("gemm", "--backend", "ref", "--dtype", "bf16", "--a", save("af.npy", a), "--b",
                     save("bf.npy", b), "--out", out)
    expect(rc == 0, se)
    c = np.load(out)
    expect(c.dtype == np.float32 and c.shape == (45, 23), f"{c.dtype} {c.shape}")

    def to_bf16(x):  # round to nearest even on the upper 16 bits (finite inputs)
        u = x.view(np.uint32).astype(np.uint64)
        return (((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16).astype(np.uint32).view(np.float32)

    want = to_bf16(a).astype(np.float64) @ to_bf16(b).astype(np.float64)
    expect(np.allclose(c, want, rtol=1e-4, atol=1e-4), f"C differs from NumPy by {np.abs(c - want).max()}")
    # int8 operands with --dtype bf16: a clear error naming the file.
    rc, so, se = run("gemm", "--backend", "ref", "--dtype", "bf16", "--a", save("a8.npy", np.zeros((2, 2), np.int8)),
                     "--b", save("b8.npy", np.zeros((2, 2), np.int8)))
    expect(rc == 2 and "a8.npy" in se, f"rc {rc}: {se}")

elif CASE == "gemm_bf16_nonfinite":
    # NaN and inf are legal bf16 data (docs/numerics.md): accepted, computed bit for bit like the
    # host contract model (--check), counted in the report; NaN results are canonical 0x7FC00000.
    rng = np.random.default_rng(8)
    for variant in range(3):
        a = rng.standard_normal((9, 21)).astype(np.float32)
        b = rng.standard_normal((21, 7)).astype(np.float32)
        if variant == 0:    # NaN in A: its row is NaN; inf in B: its column is inf or NaN
            a[2, 5] = np.nan
            b[4, 3] = np.inf
        elif variant == 1:  # -inf times 0 gives NaN; a NaN with a payload
            a[0, 0] = -np.inf
            b[0, :] = 0.0
            a[5, 1] = np.array([0x7FA12345], np.uint32).view(np.float32)[0]
        else:               # values that round to inf in bf16 (just below FLT_MAX)
            a[1, :] = np.float32(3.4e38)
            b[:, :] = np.abs(b) + 1
        out = os.path.join(TMP, f"c_nonfinite{variant}.npy")
        rc, so, se = run("gemm", "--backend", "ref", "--array-n", "4", "--dtype", "bf16", "--a",
                         save(f"anf{variant}.npy", a), "--b", save(f"bnf{variant}.npy", b), "--out", out,
                         "--check", "--json", "-q")
        expect(rc == 0, f"variant {variant}: rc {rc} {se}")
        j = json.loads(so)
        expect(j["check"]["host_model"] == "equal", so)
        want_a = int(np.count_nonzero(~np.isfinite(a)))
        want_b = int(np.count_nonzero(~np.isfinite(b)))
        expect(j["nonfinite_inputs"] == {"a": want_a, "b": want_b}, f"variant {variant}: {j['nonfinite_inputs']}")
        c = np.load(out)
        bits = c.view(np.uint32)
        expect(np.all(bits[np.isnan(c)] == 0x7FC00000), f"variant {variant}: non-canonical NaN in C")
        if variant == 0:
            expect(np.all(np.isnan(c[2, :])), f"row 2 not NaN: {c[2, :]}")
            expect(np.all(~np.isfinite(c[:, 3])), f"column 3 finite: {c[:, 3]}")
        elif variant == 1:
            expect(np.all(np.isnan(c[0, :])) and np.all(np.isnan(c[5, :])), f"rows 0/5: {c[0, :]} {c[5, :]}")
        else:
            expect(np.all(np.isposinf(c[1, :])), f"row 1 not +inf: {c[1, :]}")
    # The human report says so.
    a[3, 3] = np.nan
    rc, so, se = run("gemm", "--backend", "ref", "--array-n", "4", "--dtype", "bf16", "--a", save("anf3.npy", a),
                     "--b", save("bnf3.npy", b), "-q")
    expect(rc == 0 and "NaN or inf" in so, f"rc {rc}: {so} {se}")

elif CASE == "gemm_check_rtl":
    if not rtl_built():
        sys.exit(77)
    for m, k, n, arr in [(20, 33, 17, "16"), (9, 10, 11, "4")]:
        rc, so, se = run("gemm", "--backend", "rtl", "--array-n", arr, "--m", str(m), "--k", str(k), "--n", str(n),
                         "--check", "--json")
        expect(rc == 0, se)
        j = json.loads(so)
        expect(j["check"]["cpu"] == "equal" and j["check"]["ref"] == "equal", so)

elif CASE == "gemm_npy_out":
    a, b = good((45, 67), 1), good((67, 23), 2)
    a[0, :] = -128
    b[:, 0] = -128
    out = os.path.join(TMP, "c.npy")
    rc, so, se = run("gemm", "--backend", "ref", "--a", save("a.npy", a), "--b", save("b.npy", b), "--out", out)
    expect(rc == 0, se)
    c = np.load(out)
    expect(c.dtype == np.int32 and c.shape == (45, 23), f"{c.dtype} {c.shape}")
    expect(np.array_equal(c, a.astype(np.int32) @ b.astype(np.int32)), "C differs from NumPy")
    ex = os.path.join(os.path.dirname(FIRMWARE), "..", "examples", "gemm")
    if os.path.exists(os.path.join(ex, "a.npy")):
        rc, so, se = run("gemm", "--backend", "ref", "--a", os.path.join(ex, "a.npy"), "--b",
                         os.path.join(ex, "b.npy"), "--out", out)
        expect(rc == 0, se)
        expect(np.array_equal(np.load(out), np.load(os.path.join(ex, "c_expected.npy"))), "example differs")

elif CASE == "gemm_json_keys":
    rc, so, se = run("gemm", "--backend", "ref", "--m", "64", "--k", "64", "--n", "64", "--json")
    expect(rc == 0, se)
    j = json.loads(so)
    for key in ["backend", "array_n", "m", "k", "n", "cycles", "utilization", "wall_s", "sim_hz", "rd_bytes",
                "wr_bytes", "min_bytes", "perf"]:
        expect(key in j, f"missing key {key}: {so}")
    expect(j["backend"] == "ref" and j["array_n"] == 16 and (j["m"], j["k"], j["n"]) == (64, 64, 64), so)
    expect(j["min_bytes"] == 64 * 64 * 2 + 4 * 64 * 64, so)
    expect(0 < j["utilization"] <= 1 and j["cycles"] > 0, so)
    for key in ["mxu_active", "weight_stall", "weight_shift", "dma_wait", "instret", "rd_bytes", "wr_bytes"]:
        expect(key in j["perf"], f"perf.{key} missing")
    expect(j["perf"]["mxu_active"] == 64 * 4 * 4, so)  # 64 rows x 4 x 4 folds

elif CASE == "bad_dtype":
    a = save("a32.npy", good((4, 5), 1).astype(np.int32))
    bad_input_case(a, save("b.npy", good((5, 3), 2)), "a32.npy: dtype is int32, expected int8")

elif CASE == "bad_rank":
    a = save("a3.npy", good((2, 4, 5), 1))
    bad_input_case(a, save("b.npy", good((5, 3), 2)), "a3.npy: rank 3")

elif CASE == "bad_inner_dim":
    bad_input_case(save("a.npy", good((4, 5), 1)), save("b.npy", good((6, 3), 2)), "inner dimensions differ")

elif CASE == "truncated":
    p = save("t.npy", good((40, 50), 1))
    with open(p, "rb") as f:
        data = f.read()
    with open(p, "wb") as f:
        f.write(data[:-100])
    bad_input_case(save("a.npy", good((4, 40), 1)), p, "t.npy: truncated")

elif CASE == "not_npy":
    p = os.path.join(TMP, "text.npy")
    with open(p, "w") as f:
        f.write("1,2,3\n4,5,6\n")
    bad_input_case(p, save("b.npy", good((3, 3), 2)), "text.npy: not a .npy file")

elif CASE == "fortran_order":
    p = save("f.npy", np.asfortranarray(good((4, 5), 1)))
    bad_input_case(p, save("b.npy", good((5, 3), 2)), "f.npy: fortran_order is True")

elif CASE == "missing_file":
    bad_input_case(os.path.join(TMP, "nope.npy"), save("b.npy", good((5, 3), 2)), "nope.npy")

elif CASE == "usage_error":
    rc, so, se = run("gemm", "--backend", "gpu")
    expect(rc == 2, f"rc {rc}")
    rc, so, se = run("gemm", "--m", "0", "--backend", "ref")
    expect(rc == 2 and "must be >= 1" in se, se)
    rc, so, se = run("gemm", "--help")
    expect(rc == 0 and "--check" in so and "--array-n" in so, so)
    rc, so, se = run("frobnicate")
    expect(rc == 2, f"rc {rc}")

elif CASE == "gemm_size_overflow":
    # Issue 14, class 1: M*K overflowed 64 bits and the operands were written past a heap buffer.
    # Variants: a product that overflows only once padded, and sizes that fit 64 bits but not the
    # device's 4 GiB (refused before anything is allocated).
    for m, k, n, needle in [("1152921504606846977", "16", "16", "overflows a 64-bit size"),
                            ("16", "18446744073709551615", "16", "overflows a 64-bit size"),
                            ("65536", "65536", "16", "the device addresses at most 4 GiB"),
                            ("1099511627776", "16", "16", "the device addresses at most 4 GiB")]:
        rc, so, se = run("gemm", "--backend", "ref", "--m", m, "--k", k, "--n", n, "-q")
        expect(rc == 2, f"--m {m} --k {k} --n {n}: exit code {rc}, expected 2; stderr: {se}")
        expect(needle in se, f"'{needle}' not in stderr: {se}")

elif CASE == "bounded_reads":
    # Issue 14, class 3: /dev/zero as .npy, program or .data input was read until memory ran out.
    rc, so, se = run("disasm", "/dev/zero")
    expect(rc == 2 and "larger than the limit" in se, f"rc {rc}: {se}")
    bad_input_case("/dev/zero", save("b.npy", good((5, 3), 2)), "/dev/zero: not a .npy file")
    src = os.path.join(TMP, "zero.s")
    with open(src, "w") as f:
        f.write(".data z 0xffff0000 /dev/zero\nnop\n")
    rc, so, se = run("exec", src, "--backend", "ref")
    expect(rc == 2 and "larger than the limit of 65536 bytes" in se, f"rc {rc}: {se}")

elif CASE == "atomic_outputs":
    # Issue 14, class 4: `asm -o` on a full disk reported success with a 0-byte file, and a failing
    # .npy write left a truncated file. Now: exit non-zero, and no partial file.
    import resource
    import subprocess
    src = os.path.join(FIRMWARE, "gemm_n4.s")
    # Exit codes (tpuw --help): a full disk is a runtime failure (1), an unwritable path bad input (2).
    # A device is never written or replaced (issue 29): /dev/full is refused before any work.
    rc, so, se = run("asm", src, "-o", "/dev/full")
    expect(rc == 2 and "/dev/full: is a character device" in se, f"rc {rc}: {se}")
    rc, so, se = run("asm", src, "-o", "/proc/tpuw_cli_test.bin")  # unwritable, even for root
    expect(rc == 2 and "/proc/tpuw_cli_test.bin: cannot" in se, f"rc {rc}: {se}")
    rc, so, se = run("gemm", "--backend", "ref", "--m", "8", "--k", "8", "--n", "8", "--out", "/dev/full", "-q")
    expect(rc == 2 and "/dev/full: is a character device" in se, f"rc {rc}: {se}")
    # `ulimit -f`: the existing outputs keep their old contents, no temporary is left.
    out_bin = CLI.write("old.bin", b"old program")
    out_npy = CLI.write("old.npy", b"old tensor")
    before = sorted(os.listdir(TMP))

    def limited():
        resource.setrlimit(resource.RLIMIT_FSIZE, (64, 64))
    for args in (["asm", src, "-o", out_bin],
                 ["gemm", "--backend", "ref", "--m", "8", "--k", "8", "--n", "8", "--out", out_npy, "-q"]):
        p = subprocess.run([TPUW, *args], capture_output=True, text=True, preexec_fn=limited, timeout=120)
        expect(p.returncode == 1 and "File too large" in p.stderr, f"{args}: rc {p.returncode}: {p.stderr}")
    expect(open(out_bin, "rb").read() == b"old program", "asm -o output changed by a failed write")
    expect(open(out_npy, "rb").read() == b"old tensor", "gemm --out output changed by a failed write")
    expect(sorted(os.listdir(TMP)) == before, f"temporaries left: {sorted(os.listdir(TMP))}")

elif CASE == "version_and_exit_codes":
    # Issue 14 "Also": --version, the version in --json, and the exit codes documented in --help.
    rc, so, se = run("--version")
    expect(rc == 0 and so.startswith("tpuw ") and "(ISA " in so, f"rc {rc}: {so!r} {se!r}")
    version = so.strip()
    rc, so, se = run("info", "--backend", "ref", "--json")
    expect(rc == 0 and json.loads(so).get("tpuw_version") == version, f"rc {rc}: {so}")
    rc, so, se = run("gemm", "--backend", "ref", "--m", "8", "--k", "8", "--n", "8", "--json", "-q")
    expect(rc == 0 and json.loads(so).get("tpuw_version") == version, f"rc {rc}: {so}")
    rc, so, se = run("--help")
    for part in ("Exit codes: 0 ok", "2 bad input/usage", "3 mismatch or diverged training", "4 device fault/timeout",
                 "1 other (runtime failure, out of memory/threads/disk)"):
        expect(rc == 0 and part in so, f"{part!r} not in --help: {so}")

elif CASE == "unsigned_options":
    # Issue 14, class 2: `--m -1`, a negative or > 2^64 `--seed` / `--batch` were accepted (CLI11
    # wraps them). Each is a usage error (exit 2) naming the option, before any work or output.
    out = os.path.join(TMP, "c.npy")
    for args, needle in ((["gemm", "--m", "-1"], "--m: -1: must not be negative"),
                         (["gemm", "--seed", "-5"], "--seed: -5: must not be negative"),
                         (["gemm", "--seed", "99999999999999999999999"], "larger than 2^64 - 1"),
                         (["gemm", "--n", "1e3"], "--n: 1e3: not an unsigned integer"),
                         (["gemm", "--k", "-0"], "must not be negative"),
                         (["run", "model.onnx", "--input", "x.npy", "--batch", "-3"], "--batch: -3: must not be negative"),
                         (["gemm", "--devices", "-2"], "must not be negative")):
        rc, so, se = run(*args, "--backend", "ref", "--out", out) if args[0] == "gemm" else run(*args)
        expect(rc == 2 and needle in se, f"{args}: rc {rc}: {se}")
        expect(not os.path.exists(out), f"{args}: output written")
    rc, so, se = run("gemm", "--backend", "ref", "--seed", "18446744073709551615", "-q")
    expect(rc == 0, f"the largest seed is valid: rc {rc}: {se}")

elif CASE == "resource_exhaustion":
    # Issue 14, class 5: `ulimit -v 1000000; tpuw info --devices 64` aborted (std::terminate) when a
    # device thread or model could not be created. Now exit 1 with the resource named; two variants.
    import resource
    import subprocess
    if os.environ.get("TPUW_SANITIZE"):
        # ASan/TSan reserve terabytes of shadow address space at start-up: under an address-space
        # limit the sanitizer itself fails before tpuw runs (the worker unit test skips likewise).
        print(f"SKIP: a {os.environ['TPUW_SANITIZE']}-sanitizer build cannot run under ulimit -v")
        sys.exit(77)
    backends = ["ref"] + (["rtl"] if rtl_built() else [])
    for backend in backends:
        for devices, limit in ((64, 1000000 * 1024), (32, 300 << 20), (16, 200 << 20), (64, 700000 * 1024)):
            def limited(limit=limit):
                resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
            p = subprocess.run([TPUW, "info", "--backend", backend, "--devices", str(devices)], capture_output=True,
                               text=True, preexec_fn=limited, timeout=120)
            expect(p.returncode == 1 and "out of" in p.stderr and "terminate" not in p.stderr,
                   f"{backend}: {devices} devices in {limit} bytes: rc {p.returncode}: {p.stderr}")

elif CASE == "exec_fault":
    src = os.path.join(TMP, "bad.s")
    with open(src, "w") as f:
        f.write("nop\nnop\n.word 0xee 0 0 0\nnop\n")
    rc, so, se = run("exec", src, "--backend", "ref")
    expect(rc == 4, f"rc {rc}: {se}")
    expect("ILLEGAL_OPCODE" in se and "instruction 2 of the program" in se and "FAULT_INFO = 0xee" in se, se)
    rc, so, se = run("exec", src, "--backend", "ref", "--json")
    expect(rc == 4, f"rc {rc}")
    j = json.loads(so)
    expect(j["fault"]["cause"] == "ILLEGAL_OPCODE" and j["fault"]["index"] == 2 and j["fault"]["info"] == 0xEE, so)

elif CASE == "exec_expect":
    for prog in ["gemm_n4.s", "gemm_n16.s", "layer_n4.s", "fault_illegal_opcode.s", "fault_local_range.s"]:
        rc, so, se = run("exec", os.path.join(FIRMWARE, prog), "--backend", "ref", "--json")
        expect(rc == 0, f"{prog}: rc {rc} {se}")
        j = json.loads(so)
        expect(not j["problems"], f"{prog}: {j['problems']}")
    # A wrong .expect gives exit 3.
    src = os.path.join(TMP, "wrong.s")
    with open(os.path.join(FIRMWARE, "gemm_n4.s")) as f:
        text = f.read()
    with open(src, "w") as f:
        f.write(text.replace(".expect c     0x3000   int32   -3", ".expect c     0x3000   int32   -4"))
    expect(".expect c     0x3000   int32   -3" in text, "gemm_n4.s changed; update this test")
    rc, so, se = run("exec", src, "--backend", "ref")
    expect(rc == 3 and "expected -4" in se, f"rc {rc}: {se}")

elif CASE == "asm_disasm_roundtrip":
    out = os.path.join(TMP, "g.bin")
    rc, so, se = run("asm", os.path.join(FIRMWARE, "gemm_n4.s"), "-o", out)
    expect(rc == 0, se)
    expect(os.path.getsize(out) == 6 * 16, f"size {os.path.getsize(out)}")
    rc, so, se = run("disasm", out)
    expect(rc == 0 and "matmul" in so and "swap" in so, so)
    src = os.path.join(TMP, "round.s")
    with open(src, "w") as f:
        f.write("\n".join(line.split(";")[0] for line in so.splitlines()) + "\n")
    out2 = os.path.join(TMP, "round.bin")
    rc, so2, se = run("asm", src, "-o", out2)
    expect(rc == 0, se)
    expect(open(out, "rb").read() == open(out2, "rb").read(), "asm(disasm(x)) != x")
    rc, so, se = run("asm", os.path.join(TMP, "nonexistent.s"))
    expect(rc == 2, f"rc {rc}")

else:
    print("unknown case", CASE)
    sys.exit(1)
print("ok", CASE)
