#!/usr/bin/python3
"""The golden corpus: what the device is asked to do, frozen before the compiler moves.

For every case below the script runs `tpuw` and records
  - the device programs it submitted: the driver's program log (DeviceOptions::program_log,
    TPUW_PROGRAM_LOG), one FNV-1a 64 hash per submitted program, folded into one hash (in
    submission order on one device; as a sorted multiset with several devices, whose threads
    interleave), with the program and instruction counts;
  - the PERF counters and every other figure of its `--json` report, with wall-clock keys left out;
  - the SHA-256 of every file it wrote (outputs, trained models);
  - its exit code (a refusal is behaviour too: its first line of stderr is kept).
and compares the record with the committed tests/golden/corpus.json, key by key.

    tests/golden/golden.py TPUW [--update] [--only REGEX] [--jobs J] [--list]

The matrix: the examples (MLPs, CNNs, CNN blocks, several inputs) x {int8, bf16} x N in {4, 16} x
batch {1, 7, 64} rows x devices {1, 2} on the ref backend (the programs are the backend's
business of nobody: ref and rtl get the same ones); a slice of it on rtl (real PERF counters);
GEMMs; 3 training steps for the MLP and the CNN on one device, mirrored on 2 and pipelined on 2.

A change that alters a record must say why in its commit message; `--update` rewrites
corpus.json (review its diff: it names the cases that changed). Exit 0: every case matches;
1: a case differs or is missing; 2: usage.
"""
import argparse
import concurrent.futures
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CORPUS = os.path.join(HERE, "corpus.json")

# Keys whose values are wall-clock measurements (they differ from run to run) or machine facts.
WALL = re.compile(r"(seconds|_s$|_ms$|per_s|per_second|_hz$|^hz$|wall|elapsed|time|gops|gflops|"
                  r"throughput|_rate$|speed)", re.IGNORECASE)


# With several devices, which device takes which micro-batch or row range is the scheduler's
# choice, and so are the counters that depend on a device's history (the ref model's cycle estimate
# of a program depends on what ran before it; a device uploads weights for the first work it takes):
# the per-device split, the event log and the counters are left out; the outputs, the distinct
# programs, the shapes and the MAC counts stay.
SCHEDULED = re.compile(r"^(per_device|overlap|events|perf|rd_bytes|wr_bytes|instret|instructions)$|fraction|cycles|"
                       r"stall|wait|shift|busy|active|utilization")


def normalize(v, several):
    """The JSON report without wall-clock keys (recursively), and with several devices without the
    per-device split."""
    if isinstance(v, dict):
        return {k: normalize(x, several) for k, x in v.items()
                if not WALL.search(k) and not (several and SCHEDULED.search(k))}
    if isinstance(v, list):
        return [normalize(x, several) for x in v]
    return v


# ---------------------------------------------------------------------------------------------
# The cases. Paths are relative to the case's working directory, where `examples` links to the
# repository's examples, so that the reports (which echo paths) do not depend on the checkout.

RUN_MODELS = {
    # name: (model, {input name or "": file}, calibration {name or "": file})
    "digits_mlp": ("examples/digits/digits_mlp.onnx", {"": "examples/digits/test_x.npy"},
                   {"": "examples/digits/calib_x.npy"}),
    "digits_cnn": ("examples/digits/digits_cnn.onnx", {"": "examples/digits/test_x.npy"},
                   {"": "examples/digits/calib_x.npy"}),
    "fashion_cnn": ("examples/fashion_mnist/fashion_cnn.onnx", {"": "examples/fashion_mnist/fashion_test_x.npy"},
                    {"": "examples/fashion_mnist/fashion_test_x.npy"}),
    "residual_block": ("examples/cnn_blocks/residual_block.onnx", {"": "examples/cnn_blocks/residual_block_x.npy"},
                       None),
    "dwsep_block": ("examples/cnn_blocks/dwsep_block.onnx", {"": "examples/cnn_blocks/dwsep_block_x.npy"}, None),
    "concat_block": ("examples/cnn_blocks/concat_block.onnx", {"": "examples/cnn_blocks/concat_block_x.npy"},
                     None),
    "mobilenet_block": ("examples/cnn_blocks/mobilenet_block.onnx",
                        {"": "examples/cnn_blocks/mobilenet_block_x.npy"}, None),
    "act_chain": ("examples/cnn_blocks/act_chain.onnx", {"": "examples/cnn_blocks/act_chain_x.npy"}, None),
    "two_outputs": ("examples/cnn_blocks/two_outputs.onnx", {"": "examples/cnn_blocks/two_outputs_x.npy"}, None),
    "add_branches": ("examples/multi_input/add_branches.onnx",
                     {"a": "examples/multi_input/add_branches_a.npy",
                      "b": "examples/multi_input/add_branches_b.npy"}, None),
    "concat_mlp": ("examples/multi_input/concat_mlp.onnx",
                   {"a": "examples/multi_input/concat_mlp_a.npy", "b": "examples/multi_input/concat_mlp_b.npy"},
                   None),
    "image_vector": ("examples/multi_input/image_vector.onnx",
                     {"x": "examples/multi_input/image_vector_x.npy",
                      "v": "examples/multi_input/image_vector_v.npy"}, None),
    "two_images": ("examples/multi_input/two_images.onnx",
                   {"a": "examples/multi_input/two_images_a.npy", "b": "examples/multi_input/two_images_b.npy"},
                   None),
    "concat_images": ("examples/multi_input/concat_images.onnx",
                      {"a": "examples/multi_input/concat_images_a.npy",
                       "b": "examples/multi_input/concat_images_b.npy"}, None),
}

# The rtl slice: real PERF counters for one MLP, one CNN and a block with several inputs.
RTL_RUNS = [("digits_mlp", 7), ("fashion_cnn", 7), ("residual_block", 7), ("image_vector", 7)]


def run_case(model, prec, n, batch, devices, backend):
    path, inputs, calib = RUN_MODELS[model]
    name = f"run/{model}/{prec}/n{n}/b{batch}/d{devices}/{backend}"
    prep = []  # (source .npy, rows, destination[, "unit"])
    args = ["run", path]
    for inp, src in inputs.items():
        dst = f"in_{inp or 'x'}.npy"
        prep.append((src, batch, dst))
        args += ["--input", f"{inp}={dst}" if inp else dst]
    if prec == "int8":
        # Calibrate on the whole example set, so the scales do not depend on the batch.
        for inp, src in (calib or inputs).items():
            args += ["--calibrate", f"{inp}={src}" if inp else src]
    args += ["--output", "out.npy", "--precision", prec, "--array-n", str(n), "--backend", backend,
             "--devices", str(devices), "--json", "-q"]
    return {"name": name, "args": args, "prep": prep, "devices": devices}


def gemm_cases():
    out = []
    for backend in ("ref", "rtl"):
        for n in (4, 16):
            out.append({"name": f"gemm/example/int8/n{n}/{backend}",
                        "args": ["gemm", "--a", "examples/gemm/a.npy", "--b", "examples/gemm/b.npy", "--out",
                                 "c.npy", "--array-n", str(n), "--backend", backend, "--json", "-q"]})
            out.append({"name": f"gemm/random/bf16/n{n}/{backend}",
                        "args": ["gemm", "--m", "48", "--k", "40", "--n", "36", "--seed", "3", "--dtype", "bf16",
                                 "--out", "c.npy", "--array-n", str(n), "--backend", backend, "--json", "-q"]})
    out.append({"name": "gemm/random/int8/n16/d2/ref",
                "args": ["gemm", "--m", "64", "--k", "96", "--n", "80", "--seed", "5", "--devices", "2", "--out",
                         "c.npy", "--backend", "ref", "--json", "-q"], "devices": 2})
    return out


TRAIN_DATA = {
    # name: (untrained model, rows of (inputs, labels), source inputs, source labels)
    "mlp": ("examples/fashion_mnist/reference/digits_mlp_untrained.onnx", "examples/digits/digits_x.npy",
            "examples/digits/digits_y.npy"),
    "cnn": ("examples/fashion_mnist/reference/fashion_cnn_untrained.onnx",
            "examples/fashion_mnist/fashion_test_x.npy", "examples/fashion_mnist/fashion_test_y.npy"),
}


def train_case(model, strategy, devices, backend, n=16):
    path, x, y = TRAIN_DATA[model]
    name = f"train/{model}/{strategy}/d{devices}/n{n}/{backend}"
    prep = [(x, 96, "train_x.npy", "unit"), (y, 96, "train_y.npy")]
    args = ["train", path, "--input", "train_x.npy", "--labels", "train_y.npy", "--batch", "32", "--max-steps", "3",
            "--lr", "0.05", "--momentum", "0.9", "--backend", backend, "--array-n", str(n), "--output",
            "trained.onnx", "--json", "-q"]
    if devices > 1:
        args += ["--devices", str(devices), "--strategy", strategy]
        if strategy == "pipeline":
            args += ["--chunks", "4"]
    return {"name": name, "args": args, "prep": prep, "devices": devices}


def all_cases():
    cases = []
    for model in RUN_MODELS:
        for prec in ("int8", "bf16"):
            for n in (4, 16):
                for batch in (1, 7, 64):
                    for devices in (1, 2):
                        cases.append(run_case(model, prec, n, batch, devices, "ref"))
    for model, batch in RTL_RUNS:
        for prec in ("int8", "bf16"):
            for n in (4, 16):
                cases.append(run_case(model, prec, n, batch, 1, "rtl"))
    cases += gemm_cases()
    for model in TRAIN_DATA:
        cases.append(train_case(model, "single", 1, "ref"))
        cases.append(train_case(model, "single", 1, "ref", n=4))
        cases.append(train_case(model, "mirrored", 2, "ref"))
        cases.append(train_case(model, "pipeline", 2, "ref"))
    cases.append(train_case("mlp", "single", 1, "rtl"))
    return cases


# ---------------------------------------------------------------------------------------------

def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def fold(lines, ordered):
    """One hash over the program hashes: in order (one device) or as a sorted multiset."""
    items = lines if ordered else sorted(lines)
    return hashlib.sha256("".join(items).encode()).hexdigest()[:32]


def execute(tpuw, case):
    import numpy as np  # /usr/bin/python3 has it (python3-numpy)
    with tempfile.TemporaryDirectory(prefix="tpuw_golden_") as tmp:
        os.symlink(os.path.join(ROOT, "examples"), os.path.join(tmp, "examples"))
        for src, rows, dst, *scale in case.get("prep", []):
            a = np.load(os.path.join(ROOT, src))[:rows]
            if scale:  # "unit": uint8 pixels -> float32 in [0, 1], as the training examples feed them
                a = (a.astype(np.float32) / np.float32(255)).astype(np.float32)
            np.save(os.path.join(tmp, dst), a)
        log = os.path.join(tmp, "programs.log")
        env = dict(os.environ, TPUW_PROGRAM_LOG=log)
        p = subprocess.run([tpuw, *case["args"]], cwd=tmp, env=env, capture_output=True, text=True, timeout=600)
        rec = {"exit": p.returncode}
        if p.returncode != 0:
            rec["error"] = (p.stderr.strip().splitlines() or [""])[0]
        lines = open(log).readlines() if os.path.exists(log) else []
        several = case.get("devices", 1) > 1
        if several:
            # Each device compiles and uploads for the work it takes: the set of distinct programs
            # is fixed, how often each runs is the scheduler's choice.
            rec["distinct_programs"] = len(set(lines))
            rec["program_hash"] = fold(sorted(set(lines)), True)
        else:
            rec["programs"] = len(lines)
            rec["instructions"] = sum(int(l.split()[1]) for l in lines)
            rec["program_hash"] = fold(lines, True)
        if p.returncode == 0:
            try:
                rec["json"] = normalize(json.loads(p.stdout), several)
            except json.JSONDecodeError:
                rec["stdout_sha256"] = hashlib.sha256(p.stdout.encode()).hexdigest()
        files = {}
        for f in sorted(os.listdir(tmp)):
            full = os.path.join(tmp, f)
            if f in ("examples", "programs.log") or any(f == p[2] for p in case.get("prep", [])):
                continue
            if os.path.isfile(full):
                files[f] = sha256(full)
        rec["files"] = files
        return rec


def diff(a, b, path=""):
    """Paths where two records differ (at most a few)."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                out.append(f"{path}/{k}: {'missing' if k not in b else 'new'}")
            else:
                out += diff(a[k], b[k], f"{path}/{k}")
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        out = []
        for i, (x, y) in enumerate(zip(a, b)):
            out += diff(x, y, f"{path}[{i}]")
        return out
    return [] if a == b else [f"{path}: {json.dumps(a)[:120]} -> {json.dumps(b)[:120]}"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("tpuw")
    ap.add_argument("--update", action="store_true", help="rewrite corpus.json from this build")
    ap.add_argument("--only", default="", help="regular expression: run the matching cases only")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--list", action="store_true", help="print the case names and exit")
    a = ap.parse_args()
    a.tpuw = os.path.abspath(a.tpuw)
    cases = [c for c in all_cases() if re.search(a.only, c["name"])]
    if a.list:
        print("\n".join(c["name"] for c in cases))
        return 0
    has_rtl = subprocess.run([a.tpuw, "info", "--backend", "rtl"], capture_output=True).returncode == 0
    if not has_rtl:
        print("golden: no rtl backend in this build: the rtl cases are skipped")
        cases = [c for c in cases if "/rtl" not in c["name"] and "rtl" not in c["args"]]
    corpus = {}
    if os.path.exists(CORPUS):
        corpus = json.load(open(CORPUS))["cases"]
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, a.jobs)) as pool:
        results = dict(zip((c["name"] for c in cases), pool.map(lambda c: execute(a.tpuw, c), cases)))
    if a.update:
        merged = dict(corpus)
        merged.update(results)
        with open(CORPUS + ".tmp", "w") as f:
            json.dump({"about": "tests/golden/golden.py: device program hashes, --json reports without wall-clock "
                                "keys and output hashes; regenerate with --update and say why in the commit",
                       "cases": dict(sorted(merged.items()))}, f, indent=1, sort_keys=True)
            f.write("\n")
        os.replace(CORPUS + ".tmp", CORPUS)
        changed = [n for n in results if corpus.get(n) != results[n]]
        print(f"golden: wrote {len(results)} cases to {CORPUS}; {len(changed)} changed or new")
        for n in changed:
            print("  ", n)
        return 0
    bad = 0
    for name, rec in results.items():
        if name not in corpus:
            print(f"MISSING {name}: not in corpus.json (run with --update)")
            bad += 1
            continue
        d = diff(corpus[name], rec)
        if d:
            bad += 1
            print(f"DIFFERS {name}:")
            for line in d[:8]:
                print("   ", line)
    print(f"golden: {len(results) - bad} passed, {bad} failed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
