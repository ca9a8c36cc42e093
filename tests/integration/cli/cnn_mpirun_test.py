#!/usr/bin/python3
"""`mpirun -np P tpuw run CNN.onnx` (docs/scaling.md, host/tools/tpuw/cnn_report.h CnnRanks): rank r
runs its contiguous block of the images on its --devices K, rank 0 gathers the outputs in rank
order and alone writes and reports. Each image's computation does not depend on which images share
its run, and (int8) every rank calibrates on the same rows, so the output is the bytes of one rank
on one device:

  cnn_mpirun_bits        the Fashion-MNIST CNN, int8 and bf16, P = 1, 2 x K = 1, 2 == one device
                         (--check); a hidden layer's map and a max pool's Indices as graph outputs;
                         CNNs with several inputs; the report (per-rank lines, images/s), --json,
                         --trace (every rank's tracks); a rank with no images (P > rows)
  cnn_mpirun_rank_error  a rank whose run fails ends every rank with its message (exit 4, nothing
                         written); a bad input file: exit 2 with the file's error on the ranks
  cnn_mpirun_rank_exit   a rank that exits without a word ends the job without a hang

Skipped (77) without mpirun or when tpuw is built without MPI.

    cnn_mpirun_test.py TPUW CASE EXAMPLES_DIR
"""
import filecmp
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tpuw_cli_harness import CliHarness, expect, run_mpi  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cnn_test_models import indices_model  # noqa: E402

TPUW, CASE, EXAMPLES = sys.argv[1], sys.argv[2], sys.argv[3]
cli = CliHarness(TPUW, "tpuw_cnn_mpirun_")
FASHION = os.path.join(EXAMPLES, "fashion_mnist", "fashion_cnn.onnx")
FASHION_X = os.path.join(EXAMPLES, "fashion_mnist", "fashion_test_x.npy")
FASHION_Y = os.path.join(EXAMPLES, "fashion_mnist", "fashion_test_y.npy")
MULTI = os.path.join(EXAMPLES, "multi_input")
BLOCKS = os.path.join(EXAMPLES, "cnn_blocks")


def out(name):
    return os.path.join(cli.tmp, name)


def mpi(np_, model, *args):
    return run_mpi(TPUW, np_, ["run", model, "--backend", "ref", "-q", *args])


def output_files(path, names):
    """The files a run with --output path writes: path itself, or path.NAME.npy per graph output."""
    return [path] if not names else [f"{path[:-4]}.{n}.npy" for n in names]


def compare(model, args, names, runs, what):
    """One rank on one device writes the reference; each (P, K) of `runs` under mpirun the same bytes."""
    ref = out(f"{what}_ref.npy")
    cli.run_ok("run", model, *args, "--backend", "ref", "-q", "--output", ref)
    for p, k, extra in runs:
        y = out(f"{what}_p{p}k{k}.npy")
        dev = ["--devices", str(k)] if k > 1 else []
        rc, so, se, _ = mpi(p, model, *args, *dev, *extra, "--output", y)
        expect(rc == 0, f"{what} P={p} K={k} {extra}: exit {rc}; stderr: {se}")
        for a, b in zip(output_files(ref, names), output_files(y, names)):
            expect(filecmp.cmp(a, b, shallow=False), f"{what}: {p} ranks x {k} devices {extra}: {b} != {a}")


if CASE == "cnn_mpirun_bits":
    x = cli.save("fashion_x.npy", np.load(FASHION_X)[:101])
    y = cli.save("fashion_y.npy", np.load(FASHION_Y)[:101].astype(np.int64))
    grid = [(p, k, extra) for p in (1, 2) for k in (1, 2) for extra in ([], ["--batch", "16"])]
    for prec in ("int8", "bf16"):
        compare(FASHION, ["--input", x, "--precision", prec, "--check"], [], grid, f"fashion_{prec}")
    # int8 calibration on another set: the same scales on every rank.
    cal = cli.save("fashion_cal.npy", np.load(FASHION_X)[200:264])
    compare(FASHION, ["--input", x, "--calibrate", cal], [], [(2, 2, ["--batch", "9"]), (3, 1, [])], "fashion_cal")
    # A hidden layer's int8 map and a max pool's Indices (offset by each rank's first image).
    compare(os.path.join(BLOCKS, "two_outputs.onnx"), ["--input", os.path.join(BLOCKS, "two_outputs_x.npy"), "--check"],
            ["mid", "y"], [(2, 1, []), (2, 2, ["--batch", "3"])], "two_outputs")
    pim, pix = indices_model(cli)
    for prec in ("int8", "bf16"):
        compare(pim, ["--input", pix, "--precision", prec, "--check"], ["y", "idx"],
                [(2, 1, []), (2, 2, ["--batch", "4"])], f"indices_{prec}")
    # CNNs with several inputs: every input's rows go with their image.
    for name, names in (("image_vector", ("x", "v")), ("two_images", ("a", "b"))):
        ins = []
        for n in names:
            ins += ["--input", f"{n}={os.path.join(MULTI, f'{name}_{n}.npy')}"]
        for prec in ("int8", "bf16"):
            compare(os.path.join(MULTI, name + ".onnx"), ins + ["--precision", prec, "--check"], [],
                    [(2, 1, []), (2, 2, ["--batch", "5"])], f"{name}_{prec}")
    # The report: the ranks line with images/s, one line per rank, the per-layer table summed.
    rc, so, se, _ = mpi(2, FASHION, "--input", x, "--labels", y, "--check", "--devices", "2", "--batch", "10")
    expect(rc == 0, f"exit {rc}: {se}")
    one = cli.run_ok("run", FASHION, "--input", x, "--backend", "ref", "-q", "--labels", y)
    expect("101 images on 2 ranks x 2 devices (ref, N=16), images split in contiguous blocks:" in so and
           "images/s" in so, so)
    expect("  rank 0: images 0-49 (50), 5 micro-batches," in so and "  rank 1: images 50-100 (51), 6 micro-batches," in so,
           so)
    expect(so.count("/fc/Gemm") == 1 and "check: device output equals the CPU integer model bit for bit" in so, so)
    acc = [line for line in so.splitlines() if line.startswith("accuracy")]
    expect(acc and acc == [line for line in one.splitlines() if line.startswith("accuracy")], f"{acc}\n{one}")
    j1 = json.loads(cli.run_ok("run", FASHION, "--input", x, "--backend", "ref", "-q", "--json"))
    rc, so, se, _ = mpi(2, FASHION, "--input", x, "--json", "--batch", "20")
    expect(rc == 0, f"exit {rc}: {se}")
    j = json.loads(so)
    expect(j["ranks"] == 2 and j["devices"] == 1 and j["rows"] == 101 and j["images_per_s"] > 0, j)
    per = j["per_rank"]
    expect([r["first_row"] for r in per] == [0, 50] and [r["rows"] for r in per] == [50, 51], per)
    expect([r["micro_batches"] for r in per] == [3, 3] and j["batches"] == 6, per)
    expect(sum(r["cycles"] for r in per) == j["cycles"], f"{per} vs {j['cycles']}")
    # The per-layer MACs and minimum bytes do not depend on how the images are split.
    expect([l["macs"] for l in j["layers"]] == [l["macs"] for l in j1["layers"]] and j["macs"] == j1["macs"],
           f"{j['layers']} vs {j1['layers']}")
    # --trace: every rank's tracks in the one file rank 0 writes.
    trace = out("t.json")
    rc, so, se, _ = mpi(2, FASHION, "--input", x, "--devices", "2", "--trace", trace)
    expect(rc == 0, f"exit {rc}: {se}")
    t = json.load(open(trace))
    procs = {e["args"]["name"] for e in t["traceEvents"] if e.get("ph") == "M" and e.get("name") == "process_name"}
    for r in (0, 1):
        expect(f"rank {r}: host" in procs and any(p.startswith(f"rank {r}: device ") for p in procs), procs)
    # More ranks than images: rank 0 runs none.
    x1 = cli.save("fashion_x1.npy", np.load(FASHION_X)[:1])
    compare(FASHION, ["--input", x1, "--calibrate", x, "--check"], [], [(2, 1, []), (2, 2, [])], "one_image")
    rc, so, se, _ = mpi(2, FASHION, "--input", x1, "--calibrate", x)
    expect(rc == 0 and "  rank 0: no images," in so and "  rank 1: images 0-0 (1)," in so, f"exit {rc}: {so} {se}")
    rc, so, se, _ = mpi(2, FASHION, "--input", x1, "--calibrate", x, "--json")
    expect(rc == 0 and json.loads(so)["batch"] == 1, f"exit {rc}: {so} {se}")

elif CASE == "cnn_mpirun_rank_error":
    x = cli.save("fashion_x.npy", np.load(FASHION_X)[:40])
    for prec in ("int8", "bf16"):
        e = out(f"err_{prec}.npy")
        rc, so, se, _ = mpi(2, FASHION, "--input", x, "--precision", prec, "--inject-rank-failure", "1", "--output", e)
        expect(rc == 4, f"{prec}: exit {rc}; stderr: {se}")
        # Every rank learns of rank 1's failure in the same allgather; mpirun may kill one before it prints.
        msg = "tpuw: error: rank 1: injected failure"
        expect(se.count(msg) >= 1 and se.count("tpuw: error:") == se.count(msg), f"{prec}: {se}")
        expect(not os.path.exists(e), f"{prec}: output written")
    # A bad input file: every rank reads it before MPI starts and ends with its error, exit 2.
    bad = cli.save("bad.npy", np.zeros((4, 3, 28, 28), np.float32))
    e = out("bad_out.npy")
    rc, so, se, _ = mpi(2, FASHION, "--input", bad, "--output", e)
    expect(rc == 2 and "bad.npy: shape (4, 3, 28, 28)" in se, f"exit {rc}; stderr: {se}")
    expect(not os.path.exists(e), "output written")

elif CASE == "cnn_mpirun_rank_exit":
    x = cli.save("fashion_x.npy", np.load(FASHION_X)[:40])
    e = out("exit.npy")
    rc, so, se, dt = mpi(2, FASHION, "--input", x, "--inject-rank-failure", "1:exit", "--mpi-timeout", "20", "--output", e)
    expect(rc != 0 and dt < 60, f"exit {rc} after {dt:.1f} s; stderr: {se}")
    expect(not os.path.exists(e), "output written")

else:
    sys.exit(f"unknown case {CASE}")
print("ok")
