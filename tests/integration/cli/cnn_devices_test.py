#!/usr/bin/python3
"""tpuw run on a CNN with --devices K (host/tools/tpuw/cnn_report.cpp run_cnn_batches,
worker::run_micro_batches; docs/network_compiler.md "CNNs on several devices"): the images are cut
into micro-batches spread over K devices. Each image's computation does not depend on which images
share its run, so the output is the same bytes for any K and any micro-batch:

  cnn_devices_bits    the Fashion-MNIST CNN in int8 and bf16 on ref, K = 1, 2, 3 and micro-batches
                      7, 16 and automatic == one device in one batch; a model with a hidden layer's
                      map and a max pool's Indices as graph outputs; the multi-input CNNs
                      (examples/multi_input); the report and --json (per device, overlap, layers)
  cnn_devices_fault   a device fault injected before one micro-batch: the Worker resets the device
                      and runs that range again on the other one; the same output bytes
  cnn_devices_bad     --strategy pipeline, --inject-fault misuse: exit 2 with the reason
  cnn_devices_rtl     2 rtl devices == 1 ref device, int8 and bf16 (skipped without rtl)
  cnn_devices_trace   --trace: a program span per convolution / pooling / dense program per device

    cnn_devices_test.py TPUW CASE EXAMPLES_DIR
"""
import filecmp
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tpuw_cli_harness import CliHarness, expect  # noqa: E402
from cnn_test_models import indices_model  # noqa: E402

TPUW, CASE, EXAMPLES = sys.argv[1], sys.argv[2], sys.argv[3]
cli = CliHarness(TPUW, "tpuw_cnn_devices_")
FASHION = os.path.join(EXAMPLES, "fashion_mnist", "fashion_cnn.onnx")
FASHION_X = os.path.join(EXAMPLES, "fashion_mnist", "fashion_test_x.npy")
MULTI = os.path.join(EXAMPLES, "multi_input")
BLOCKS = os.path.join(EXAMPLES, "cnn_blocks")


def out(name):
    return os.path.join(cli.tmp, name)


def rtl_built():
    rc, _, _ = cli.run("info", "--backend", "rtl", "--json")
    return rc == 0


def same(a, b, what):
    expect(filecmp.cmp(a, b, shallow=False), f"{what}: {b} differs from {a}")


def fashion_rows(n):
    return cli.save(f"fashion_{n}.npy", np.load(FASHION_X)[:n])


def output_files(path, names):
    """The files a run with --output path writes: path itself, or path.NAME.npy per graph output."""
    if not names:
        return [path]
    stem = path[:-4]
    return [f"{stem}.{n}.npy" for n in names]


def compare_runs(model, args, names, runs, what):
    """Runs `model` once per entry of `runs` (extra args) writing --output; every file equals run 0's."""
    base = None
    for i, extra in enumerate(runs):
        y = out(f"{what}_{i}.npy")
        cli.run_ok("run", model, *args, "--backend", "ref", "-q", "--output", y, *extra)
        files = output_files(y, names)
        if base is None:
            base = files
            continue
        for a, b in zip(base, files):
            same(a, b, f"{what} {extra}")


if CASE == "cnn_devices_bits":
    x = fashion_rows(100)
    runs = [[], ["--batch", "100"], ["--devices", "1", "--strategy", "data"], ["--devices", "2"],
            ["--devices", "2", "--batch", "7"], ["--devices", "3", "--batch", "16"], ["--devices", "3", "--batch", "7"]]
    for prec in ("int8", "bf16"):
        compare_runs(FASHION, ["--input", x, "--precision", prec, "--check"], [], runs, f"fashion_{prec}")
    # Graph outputs other than the network's: a hidden layer's int8 map (two_outputs) and a max
    # pool's Indices (offset by each micro-batch's first image), int8; Indices in bf16 too.
    two = os.path.join(BLOCKS, "two_outputs.onnx")
    compare_runs(two, ["--input", os.path.join(BLOCKS, "two_outputs_x.npy"), "--check"], ["mid", "y"],
                 [[], ["--devices", "2", "--batch", "3"], ["--devices", "3", "--batch", "5"]], "two_outputs")
    pim, pix = indices_model(cli)
    for prec in ("int8", "bf16"):
        compare_runs(pim, ["--input", pix, "--precision", prec, "--check"], ["y", "idx"],
                     [[], ["--devices", "2", "--batch", "5"], ["--devices", "3", "--batch", "4"]], f"indices_{prec}")
    # CNNs with several inputs: every input's rows go with their image.
    for name, names in (("image_vector", ("x", "v")), ("two_images", ("a", "b")), ("concat_images", ("a", "b"))):
        ins = []
        for n in names:
            ins += ["--input", f"{n}={os.path.join(MULTI, f'{name}_{n}.npy')}"]
        for prec in ("int8", "bf16"):
            compare_runs(os.path.join(MULTI, name + ".onnx"), ins + ["--precision", prec, "--check"], [],
                         [[], ["--devices", "2", "--batch", "5"], ["--devices", "3"]], f"{name}_{prec}")
    # The report: the run line, one line per device (rows, micro-batches, busy, cycles), then the
    # per-layer table once; --json with the dense path's keys.
    so = cli.run_ok("run", FASHION, "--input", x, "--backend", "ref", "-q", "--devices", "2", "--batch", "10")
    expect("100 images on ref (N=16) in 10 batches of 10" in so and "on 2 devices, strategy data (micro-batches of "
           "10 images): overlap" in so, so)
    # One line per device that ran micro-batches (under load one device may take them all).
    expect(so.count("  device ") in (1, 2) and "micro-batches, busy" in so and so.count("/fc/Gemm") == 1, so)
    j = json.loads(cli.run_ok("run", FASHION, "--input", x, "--backend", "ref", "-q", "--devices", "3", "--batch", "10",
                              "--json"))
    expect(j["devices"] == 3 and j["strategy"] == "data" and j["micro_batch"] == 10 and j["micro_batches"] == 10, j)
    expect(j["batch"] == 10 and j["batches"] == 10 and j["failures"] == 0, j)
    per = j["per_device"]
    expect(sum(d["rows"] for d in per) == 100 and sum(d["items"] for d in per) == 10, per)
    expect(sum(d["cycles"] for d in per) == j["cycles"], f"{per} vs {j['cycles']}")
    # A device may get no micro-batch when another takes them first (unpinned tasks on a loaded
    # machine): its busy time is 0, never negative, and some device was busy.
    expect(all(d["busy_s"] >= 0 and 0 <= d["busy_fraction"] <= 1.0 + 1e-9 for d in per), per)
    expect(any(d["busy_s"] > 0 for d in per), per)
    expect(0 < j["overlap"] <= 1.0 + 1e-9 and j["images_per_s"] > 0, j)
    expect([l["kind"] for l in j["layers"]] == ["conv", "maxpool", "conv", "maxpool", "dense"], j["layers"])
    expect(j["cycles_per_image"] == j["cycles"] / 100, j)
    # Every input's shape (several inputs): the header line and --json input_shape.
    ins = ["--input", f"x={os.path.join(MULTI, 'image_vector_x.npy')}",
           "--input", f"v={os.path.join(MULTI, 'image_vector_v.npy')}"]
    mv = os.path.join(MULTI, "image_vector.onnx")
    so = cli.run_ok("run", mv, *ins, "--backend", "ref", "-q", "--devices", "2")
    expect("inputs 'x' [batch, 1, 12, 12], 'v' [batch, 5] -> " in so, so)
    j = json.loads(cli.run_ok("run", mv, *ins, "--backend", "ref", "-q", "--json"))
    expect(j["input_shape"] == {"x": [1, 12, 12], "v": [5]}, j["input_shape"])
    j = json.loads(cli.run_ok("run", FASHION, "--input", x, "--backend", "ref", "-q", "--json"))
    expect(j["input_shape"] == [1, 28, 28] and "devices" not in j, j)

elif CASE == "cnn_devices_fault":
    # Micro-batch 3 faults its device (a DMA error response, as docs/faults.md's memory fault): the
    # Worker resets it, re-creates it when the reset fails, and runs the task (its range of
    # micro-batches) again on the other device. The output is the fault-free one.
    x = fashion_rows(60)
    for prec in ("int8", "bf16"):
        clean, faulted = out(f"clean_{prec}.npy"), out(f"fault_{prec}.npy")
        cli.run_ok("run", FASHION, "--input", x, "--backend", "ref", "-q", "--precision", prec, "--output", clean)
        j = json.loads(cli.run_ok("run", FASHION, "--input", x, "--backend", "ref", "-q", "--precision", prec,
                                  "--devices", "2", "--batch", "10", "--inject-fault", "3", "--json", "--output",
                                  faulted, "--check"))
        same(clean, faulted, f"{prec} with a fault")
        expect(j["failures"] == 1, j["failures"])
        expect(any("failed (device fault" in e for e in j["events"]) and
               any("retrying 'data micro-batch" in e for e in j["events"]), j["events"])
        expect(sum(d["rows"] for d in j["per_device"]) == 60, j["per_device"])
    # The human report lists what happened.
    so = cli.run_ok("run", FASHION, "--input", x, "--backend", "ref", "-q", "--devices", "2", "--batch", "10",
                    "--inject-fault", "0")
    expect("failed (device fault" in so and "retrying" in so, so)

elif CASE == "cnn_devices_bad":
    x = fashion_rows(20)
    for prec in ("int8", "bf16"):
        for extra, msg in ((["--devices", "2", "--strategy", "pipeline"],
                            "--strategy pipeline: a CNN runs data-parallel only"),
                           (["--inject-fault", "1"], "--inject-fault needs --devices"),
                           (["--devices", "2", "--batch", "10", "--inject-fault", "2"],
                            "--inject-fault 2: the run has 2 micro-batches"),
                           (["--devices", "2", "--inject-fault", "x"], "expected a micro-batch number"),
                           (["--devices", "2", "--trace", cli.tmp], "is a directory")):
            rc, so, se = cli.run("run", FASHION, "--input", x, "--backend", "ref", "-q", "--precision", prec, *extra)
            expect(rc == 2 and msg in se, f"{prec} {extra}: exit {rc}, stderr {se!r}, wanted {msg!r}")
    # A dense-layer model: --inject-fault is refused, bf16 still runs on one device.
    mlp = os.path.join(EXAMPLES, "multi_input", "concat_mlp.onnx")
    rc, so, se = cli.run("run", mlp, "--input", f"a={os.path.join(MULTI, 'concat_mlp_a.npy')}", "--input",
                         f"b={os.path.join(MULTI, 'concat_mlp_b.npy')}", "--backend", "ref", "--devices", "2",
                         "--inject-fault", "0")
    expect(rc == 2 and "--inject-fault: for a CNN on several devices only" in se, f"exit {rc} {se}")

elif CASE == "cnn_devices_rtl":
    if not rtl_built():
        sys.exit(77)
    x = fashion_rows(12)
    for prec in ("int8", "bf16"):
        a, b = out(f"ref_{prec}.npy"), out(f"rtl_{prec}.npy")
        cli.run_ok("run", FASHION, "--input", x, "--backend", "ref", "-q", "--precision", prec, "--output", a)
        j = json.loads(cli.run_ok("run", FASHION, "--input", x, "--backend", "rtl", "-q", "--precision", prec,
                                  "--devices", "2", "--batch", "4", "--check", "--json", "--output", b))
        same(a, b, f"{prec}: 2 rtl devices vs 1 ref")
        expect(len(j["per_device"]) >= 1 and sum(d["rows"] for d in j["per_device"]) == 12, j["per_device"])

elif CASE == "cnn_devices_trace":
    x = fashion_rows(24)
    layers = ["/conv1/Conv", "/pool1/MaxPool", "/conv2/Conv", "/pool2/MaxPool", "dense head"]
    for devices in (None, 2):
        for prec in ("int8", "bf16"):
            t = out(f"trace_{devices}_{prec}.json")
            extra = ["--devices", str(devices), "--batch", "6"] if devices else ["--batch", "8"]
            cli.run_ok("run", FASHION, "--input", x, "--backend", "ref", "-q", "--precision", prec, "--trace", t,
                       *extra)
            ev = json.load(open(t))["traceEvents"]
            procs = {e["pid"]: e["args"]["name"] for e in ev if e.get("ph") == "M" and e["name"] == "process_name"}
            threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in ev
                       if e.get("ph") == "M" and e["name"] == "thread_name"}
            spans = [e for e in ev if e.get("ph") == "X"]
            prog = [e for e in spans if e["pid"] >= 100 and threads[(e["pid"], e["tid"])] == "program"]
            batches = 4 if devices else 3
            # One program span per layer per micro-batch, on the device that ran it.
            for name in layers:
                n = sum(1 for e in prog if e["name"].startswith(name))
                expect(n == batches, f"{devices} {prec}: {name}: {n} program spans, want {batches}")
            for j in range(batches):
                pids = {e["pid"] for e in prog if e["name"].endswith(f"(micro-batch {j})")}
                expect(len(pids) == 1, f"micro-batch {j} on devices {pids}")
            expect(all(e["dur"] > 0 for e in prog), prog)
            host = [e for e in spans if e["pid"] == 1]
            if devices:
                # Which device takes which micro-batch is the Worker's scheduling: on a loaded machine
                # one device may run them all, so the trace has one or both devices, never others.
                devs = sorted(p for p in procs if p >= 100)
                expect(devs in ([100], [101], [100, 101]), procs)
                drivers = {threads[(e["pid"], e["tid"])] for e in host if e["name"].startswith("micro-batch")}
                expect(drivers and drivers <= {"device 0 driver", "device 1 driver"}, drivers)
                expect({e["pid"] for e in prog} <= set(devs), (devs, {e["pid"] for e in prog}))
                expect(any(e["name"] == "open 2 devices" for e in host), host)
            else:
                expect(sorted(p for p in procs if p >= 100) == [100], procs)
                expect(sum(1 for e in host if e["name"].startswith("batch ")) == 3, host)
    # --trace and --output the same file: refused.
    rc, so, se = cli.run("run", FASHION, "--input", x, "--backend", "ref", "--trace", out("same.npy"), "--output",
                         out("same.npy"))
    expect(rc == 2 and "the same file as --output" in se, f"exit {rc} {se}")

else:
    sys.exit(f"unknown case {CASE}")
