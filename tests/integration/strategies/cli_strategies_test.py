#!/usr/bin/python3
"""tpuw --devices / --strategy: cli_strategies_test.py TPUW CASE DIGITS_DIR (exit 77 = skipped).

Runs the committed digits example and random GEMMs on several devices and compares with one device;
needs only NumPy."""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tpuw_cli_harness import CliHarness, expect  # noqa: E402

TPUW, CASE, DIGITS = sys.argv[1], sys.argv[2], sys.argv[3]
CLI = CliHarness(TPUW, "tpuw_strat_")
TMP = CLI.tmp
run = CLI.run
run_ok = CLI.run_ok
MODEL = os.path.join(DIGITS, "digits_mlp.onnx")
TEST_X = os.path.join(DIGITS, "test_x.npy")
TEST_Y = os.path.join(DIGITS, "test_y.npy")
CALIB = os.path.join(DIGITS, "calib_x.npy")


def rtl_built():
    rc, _, _ = run("info", "--backend", "rtl", "--json")
    return rc == 0


# The rtl backend where the build has it (a -DTPUW_WITH_RTL=OFF build, e.g. the sanitizer presets,
# runs the ref parts of every case).
RTL = rtl_built()


def model_run(out, *extra):
    return run_ok("run", MODEL, "--input", TEST_X, "--labels", TEST_Y, "--calibrate", CALIB, "--output", out,
                  "-q", *extra)


if CASE in ("run_data", "run_pipeline"):
    strategy = CASE.split("_")[1]
    one = os.path.join(TMP, "one.npy")
    model_run(one, "--backend", "ref")
    for backend, devices in [("ref", "2"), ("ref", "4")] + ([("rtl", "2")] if RTL else []):
        out = os.path.join(TMP, f"{backend}{devices}.npy")
        so = model_run(out, "--backend", backend, "--devices", devices, "--strategy", strategy, "--batch", "64",
                       "--check")
        expect(np.array_equal(np.load(out), np.load(one)), f"{backend} x{devices} {strategy} output differs")
        expect(f"strategy {strategy}: 6 micro-batches of 64 rows" in so, so)
        expect("overlap" in so and "busy" in so, so)
        expect(("device 0: stage 0" if strategy == "pipeline" else ": rows 0-") in so, so)
        expect("check: device output equals the CPU integer model bit for bit" in so, so)
        expect(f"int8 on {backend} 97.77%" in so, so)
        if strategy == "pipeline":
            expect("stage 0: layers 0-0" in so and "stage 1: layers 1-1" in so, so)
            expect("steady state" in so, so)

elif CASE == "run_json":
    out = os.path.join(TMP, "y.npy")
    for strategy in ["data", "pipeline"]:
        so = model_run(out, "--backend", "ref", "--devices", "2", "--strategy", strategy, "--batch", "100", "--json")
        j = json.loads(so)
        for key in ["model", "backend", "rows", "batch", "batches", "devices", "strategy", "wall_s", "overlap",
                    "per_device", "cycles", "macs", "accuracy", "check", "output"]:
            expect(key in j, f"missing {key}: {so}")
        expect(j["strategy"] == strategy and j["batch"] == 100 and j["batches"] == 4 and j["rows"] == 359, so)
        expect(0 < j["overlap"] <= 1.0, so)
        expect(j["macs"] == 359 * (64 * 32 + 32 * 10), so)
        for d in j["per_device"]:
            for key in ["index", "role", "items", "busy_s", "busy_fraction", "cycles", "utilization", "perf"]:
                expect(key in d, f"per_device missing {key}: {d}")
            expect(d["cycles"] == d["perf"]["cycles"] and d["cycles"] > 0, str(d))
        expect(j["cycles"] == sum(d["cycles"] for d in j["per_device"]), so)
        if strategy == "pipeline":
            expect(j["devices"] == 2 and len(j["stages"]) == 2 and "steady_s" in j, so)
            expect(j["stages"][0] == {"first_layer": 0, "last_layer": 0}, so)
            expect(sum(d["macs"] for d in j["per_device"]) == j["macs"], so)

elif CASE == "gemm_devices":
    rng = np.random.default_rng(3)
    a = rng.integers(-128, 128, size=(40, 70), dtype=np.int8)
    b = rng.integers(-128, 128, size=(70, 90), dtype=np.int8)
    ap, bp = os.path.join(TMP, "a.npy"), os.path.join(TMP, "b.npy")
    np.save(ap, a)
    np.save(bp, b)
    want = a.astype(np.int32) @ b.astype(np.int32)
    for backend, devices in [("ref", "1"), ("ref", "2"), ("ref", "4")] + ([("rtl", "2")] if RTL else []):
        out = os.path.join(TMP, f"c{backend}{devices}.npy")
        so = run_ok("gemm", "--a", ap, "--b", bp, "--out", out, "--backend", backend, "--devices", devices,
                    "--strategy", "data", "--check", "-q")
        expect(np.array_equal(np.load(out), want), f"{backend} x{devices}: C differs")
        expect("B's columns split" in so and '"one_device":"equal"' in so and "overlap" in so, so)
        # tasks are not pinned (a failed block is retried on another device): any device may run block 0
        expect(": columns 0-" in so, so)

elif CASE == "gemm_json":
    so = run_ok("gemm", "--backend", "ref", "--m", "64", "--k", "64", "--n", "128", "--devices", "2", "--json", "-q")
    j = json.loads(so)
    for key in ["backend", "m", "k", "n", "cycles", "macs", "devices", "strategy", "split", "wall_s", "overlap",
                "per_device", "check"]:
        expect(key in j, f"missing {key}: {so}")
    expect(j["devices"] == 2 and j["strategy"] == "data" and j["split"] == "columns", so)
    roles = sorted(r for d in j["per_device"] for r in d["role"].split(", "))
    expect(roles == ["columns 0-63", "columns 64-127"], so)
    expect(j["micro_batches"] == 2, so)
    expect(sum(d["macs"] for d in j["per_device"]) == 64 * 64 * 128, so)

elif CASE == "info_devices":
    rc, so, se = run("info", "--backend", "ref", "--devices", "3", "--json")
    expect(rc == 0, se)
    j = json.loads(so)
    expect(len(j["devices"]) == 3 and j["healthy"] == 3, so)
    expect([d["index"] for d in j["devices"]] == [0, 1, 2], so)
    expect(all(d["id"] == "0x54505557" and d["array_n"] == 16 for d in j["devices"]), so)
    if RTL:
        so = run_ok("info", "--backend", "rtl", "--devices", "2")
        expect("2 devices on rtl" in so and "device 1: ID 0x54505557" in so, so)

elif CASE == "bad_options":
    for args, needle in [
        (["gemm", "--backend", "ref", "--devices", "2", "--strategy", "pipeline"], "pipeline"),
        (["gemm", "--backend", "ref", "--devices", "2", "--strategy", "model"], "strategy"),
        (["gemm", "--backend", "ref", "--devices", "0"], "devices"),
        (["gemm", "--backend", "rtl" if RTL else "ref", "--devices", "2", "--wave", os.path.join(TMP, "w.fst")],
         "--wave"),
        (["run", MODEL, "--input", TEST_X, "--backend", "ref", "--devices", "2", "--strategy", "tensor"], "strategy"),
    ]:
        rc, so, se = run(*args)
        expect(rc == 2, f"{args}: exit {rc}, expected 2; {so} {se}")
        expect(needle in se, f"{args}: '{needle}' not in {se}")
    # a run error inside a multi-device run is still exit 2 (bad input), not a crash
    rc, so, se = run("run", os.path.join(TMP, "missing.onnx"), "--input", TEST_X, "--devices", "2")
    expect(rc == 2 and "tpuw: error:" in se, f"{rc} {se}")

elif CASE == "backend_names":
    rc, so, se = run("gemm", "--help")
    expect(rc == 0, se)
    for name in ["rtl", "ref", "serial"]:
        expect(name in so, f"--backend help does not offer {name}: {so}")
    rc, so, se = run("run", "--help")
    expect(rc == 0 and "serial" in so and "--devices" in so and "--strategy" in so, so)
    rc, so, se = run("info", "--backend", "gpu")
    expect(rc == 2, f"rc {rc}")

else:
    print("unknown case", CASE)
    sys.exit(2)
