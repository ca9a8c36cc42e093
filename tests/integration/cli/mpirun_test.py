#!/usr/bin/python3
"""`mpirun -np P tpuw run` (docs/scaling.md): rows sharded over the ranks in contiguous blocks and
gathered in order on rank 0. The output .npy is byte-identical to one rank for P = 1, 2 x K = 1, 2
(int8) and P = 2 (bf16); a rank whose run fails ends every rank with that rank's error; a rank that
exits ends the job without a hang. Skipped (77) without mpirun or when tpuw is built without MPI.

    mpirun_test.py TPUW CASE EXAMPLES_DIR
"""
import filecmp
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tpuw_cli_harness import CliHarness, expect, run_mpi  # noqa: E402

TPUW, CASE, EXAMPLES = sys.argv[1], sys.argv[2], sys.argv[3]
cli = CliHarness(TPUW, "tpuw_mpirun_")
DIGITS = os.path.join(EXAMPLES, "digits")
MODEL = os.path.join(DIGITS, "digits_mlp.onnx")
TEST_X = os.path.join(DIGITS, "test_x.npy")
TEST_Y = os.path.join(DIGITS, "test_y.npy")


def out(name):
    return os.path.join(cli.tmp, name)


def mpi(np_, *args):
    return run_mpi(TPUW, np_, ["run", MODEL, "--input", TEST_X, "--backend", "ref", "-q", *args])


if CASE == "mpirun_bits":
    cli.run_ok("run", MODEL, "--input", TEST_X, "--backend", "ref", "-q", "--output", out("one.npy"))
    for p in (1, 2):
        for k in (1, 2):
            name = out(f"p{p}k{k}.npy")
            rc, so, se, _ = mpi(p, "--devices", str(k), "--batch", "32", "--output", name, "--labels", TEST_Y,
                                "--check", "--json")
            expect(rc == 0, f"P={p} K={k}: exit {rc}; stderr: {se}")
            expect(filecmp.cmp(out("one.npy"), name, shallow=False), f"{p} ranks x {k} devices != one device")
            j = json.loads(so)
            expect(j["check"] == {"cpu": "equal"} and j["accuracy"]["rows"] == 359, f"{j}")
            if p == 2:
                expect(j["ranks"] == 2 and j["devices"] == k and len(j["per_rank"]) == 2, f"{j}")
                expect([r["first_row"] for r in j["per_rank"]] == [0, 179] and
                       [r["rows"] for r in j["per_rank"]] == [179, 180], f"{j['per_rank']}")
    cli.run_ok("run", MODEL, "--input", TEST_X, "--backend", "ref", "-q", "--precision", "bf16", "--output",
               out("bf1.npy"))
    rc, so, se, _ = mpi(2, "--precision", "bf16", "--batch", "64", "--check", "--output", out("bf2.npy"))
    expect(rc == 0, f"bf16: exit {rc}; stderr: {se}")
    expect("rank 1: rows 179-358 (180)" in so, f"rank 1's line missing: {so}")
    expect(filecmp.cmp(out("bf1.npy"), out("bf2.npy"), shallow=False), "bf16: 2 ranks != one rank")

elif CASE == "mpirun_rank_error":
    rc, so, se, _ = mpi(2, "--inject-rank-failure", "1", "--output", out("err.npy"))
    expect(rc == 4, f"exit {rc}; stderr: {se}")
    # Every rank learns of rank 1's failure in the same allgather and reports it, but mpirun may kill
    # a rank before it prints once another has exited non-zero: at least one report, and no other error.
    expect(se.count("tpuw: error: rank 1: injected failure") >= 1 and se.count("tpuw: error:") ==
           se.count("tpuw: error: rank 1: injected failure"), f"the ranks name rank 1's failure: {se}")
    expect(not os.path.exists(out("err.npy")), "output written")

elif CASE == "mpirun_rank_exit":
    rc, so, se, dt = mpi(2, "--inject-rank-failure", "1:exit", "--mpi-timeout", "20", "--output", out("exit.npy"))
    expect(rc != 0 and dt < 60, f"exit {rc} after {dt:.1f} s; stderr: {se}")
    expect(not os.path.exists(out("exit.npy")), "output written")

else:
    sys.exit(f"unknown case {CASE}")
print("ok")
