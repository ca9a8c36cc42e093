#!/usr/bin/python3
"""ONNX node conformance of `tpuw run` (issues 13 and 25; docs/conformance.md). Needs only NumPy.

    run_conformance.py TPUW [--backend ref|rtl] [--precision int8,bf16] [--only-passing]
                            [--expected FILE] [--update] [--cases DIR] [--json FILE] [--markdown] [-j N]

Every case under cases/ (exported by scripts/gen_conformance.py from ONNX's own node tests: one
operator, its float32 input as the model's input, the other inputs initializers) runs through
`tpuw run MODEL -i input.npy -o out.npy --backend B --precision P --check` and gets one verdict:

    pass   exit 0 and the output within the tolerance of ONNX's expected output:
           max |out - expected| <= tol * max |expected| (int8 6%, calibrated on the test input;
           bf16 2%); every further output too (Split's parts), an integer one (MaxPool's int64
           Indices) exactly ONNX's
    refused exit 2 with a message naming the node and its operator, or the graph input/output
           or initializer a graph-level limit is about (a clean refusal)
    WRONG  exit 0 with an output off by more than the tolerance, or of the wrong size
    BADMSG exit 2 with a message that names neither
    CRASH  any other exit (a signal, an internal error, --check's exit 3)

Every case counts: the table gives per operator the cases, those that cannot pass whatever the
compiler does (CANNOT_PASS below, each with its reason) and the cases passing in each precision;
the total is passing / all cases. The test fails on any WRONG (but the listed precision limits),
BADMSG or CRASH, and when a case the expected table (expected.json, per case and precision:
"pass" or "refused") lists as passing no longer passes. Newly passing cases are reported;
--update rewrites the table.
"""
import argparse
import collections
import concurrent.futures
import json
import os
import pathlib
import subprocess
import sys
import tempfile

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
TOLERANCE = {"int8": 0.06, "bf16": 0.02}

# Operators in the order of issue 13's list (Gelu is not in onnx 1.12's node tests), then issue 25's.
OP_ORDER = ("Conv MaxPool AveragePool GlobalAveragePool BatchNormalization Add Mul Div Sub Concat Clip Relu "
            "LeakyRelu Sigmoid Tanh HardSigmoid HardSwish Gelu Erf Flatten Reshape Transpose Squeeze Unsqueeze "
            "Gemm MatMul Softmax LogSoftmax LayerNormalization Pad "
            "Split Slice Gather Where Cast Expand ReduceMean ReduceSum Pow Sqrt").split()

# Cases no compiler change can make pass, with the reason. They stay in the denominator; they
# still run and must not crash or answer with a wrong message.
CANNOT_PASS = {
    "test_cast_FLOAT_to_STRING": "the output is a tensor of strings: tpuw's tensors and .npy outputs are numbers",
    "test_castlike_FLOAT_to_STRING_expanded": "the output is a tensor of strings: tpuw's tensors and .npy outputs are numbers",
}


# Cases whose inputs the device's number formats cannot represent: a WRONG answer here is the
# precision's limit, not a bug. Listed with the reason; they still must not crash. None today:
# test_softmax_large_number and test_logsoftmax_large_number (10000..10003 next to 0..3) were the
# two until host operators on the graph input ran on the raw fp32 rows before the device
# (docs/network_compiler.md, "Host operators").
PRECISION_LIMITS = {}


def run_case(tpuw, case_dir, case, backend, precision, tmp):
    op = case["op"]
    out = pathlib.Path(tmp) / "out.npy"
    # Several graph outputs (MaxPool with Indices): tpuw writes out.NAME.npy for each.
    names = case.get("outputs", [])
    files = [pathlib.Path(tmp) / f"out.{n}.npy" for n in names] if names else [out]
    for f in files:
        if f.exists():
            f.unlink()
    cmd = [tpuw, "run", str(case_dir / "model.onnx"), "-i", str(case_dir / "input.npy"), "-o", str(out),
           "--backend", backend, "--precision", precision, "--check", "-q"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    msg = (p.stderr.strip().splitlines() or [""])[-1]
    if p.returncode == 2:
        # A clean refusal names the node and its operator ("node 'NAME' (OP): ..."), or for a
        # graph-level limit the graph input or output it is about.
        # An initializer the importer cannot hold (Pow's uint32 exponent) is named the same way.
        if (("node '" in msg and f"({op})" in msg) or "graph input '" in msg or "graph output '" in msg
                or "initializer '" in msg):
            return "refused", msg
        return "BADMSG", msg
    if p.returncode != 0:
        return "CRASH", f"exit {p.returncode}: {msg}"
    worst = 0.0
    for i, f in enumerate(files):
        label = f"output '{names[i]}'" if names else "output"
        want = np.load(case_dir / ("expected.npy" if i == 0 else f"expected.{names[i]}.npy"))
        try:
            got = np.load(f)
        except (OSError, ValueError) as e:
            return "WRONG", f"no {label}: {e}"
        if want.dtype.kind not in "fiub":  # strings (Cast to STRING)
            return "WRONG", f"{label}: ONNX's is {want.dtype}, tpuw wrote {got.dtype} numbers"
        if want.dtype.kind in "iub":  # integers (MaxPool's Indices): exactly ONNX's
            if got.dtype != want.dtype or got.shape != want.shape or not np.array_equal(got, want):
                return "WRONG", (f"{label} ({got.dtype} {list(got.shape)}) differs from ONNX's "
                                 f"({want.dtype} {list(want.shape)})")
            continue
        # Floating outputs (any width: float64, float16 and bfloat16 Casts compare by value).
        want = want.astype(np.float64).ravel()
        got = got.astype(np.float64).ravel()
        if got.size != want.size:
            return "WRONG", f"{label} has {got.size} values, expected {want.size}"
        scale = float(np.max(np.abs(want))) if want.size else 0.0
        err = float(np.max(np.abs(got - want))) if want.size else 0.0
        rel = err / scale if scale > 0 else err
        if not rel <= TOLERANCE[precision]:  # a NaN fails too
            return "WRONG", f"{label}: max error {rel:.4f} of max |y| (tolerance {TOLERANCE[precision]})"
        worst = max(worst, rel)
    return "pass", f"max error {worst:.4f} of max |y|"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tpuw")
    ap.add_argument("--backend", default="ref")
    ap.add_argument("--precision", default="int8,bf16")
    ap.add_argument("--cases", default=str(HERE / "cases"))
    ap.add_argument("--expected", default=str(HERE / "expected.json"))
    ap.add_argument("--only-passing", action="store_true", help="run only the cases the expected table passes")
    ap.add_argument("--update", action="store_true", help="rewrite the expected table from this run")
    ap.add_argument("--json", help="write every verdict as JSON")
    ap.add_argument("-j", "--jobs", type=int, default=1, help="cases run at once (default 1)")
    ap.add_argument("--markdown", action="store_true", help="print the per-operator table as Markdown")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every case's verdict")
    args = ap.parse_args()

    cases_dir = pathlib.Path(args.cases)
    index = json.loads((cases_dir / "index.json").read_text())
    precisions = args.precision.split(",")
    exp_path = pathlib.Path(args.expected)
    expected = json.loads(exp_path.read_text()) if exp_path.exists() else {}

    verdicts = {}  # name -> precision -> (verdict, message)
    jobs = [(case, prec) for case in index for prec in precisions
            if not (args.only_passing and expected.get(case["name"], {}).get(prec) != "pass")]

    def one(job):
        case, prec = job
        with tempfile.TemporaryDirectory() as tmp:  # one directory per run: runs may overlap
            return run_case(args.tpuw, cases_dir / case["name"], case, args.backend, prec, tmp)

    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        for (case, prec), v in zip(jobs, pool.map(one, jobs)):
            verdicts.setdefault(case["name"], {})[prec] = v
            if args.verbose:
                print(f"{case['name']:50s} {prec:5s} {v[0]:8s} {v[1]}")

    # Per-operator table: every case counts.
    by_op = collections.OrderedDict((op, []) for op in OP_ORDER)
    for case in index:
        by_op.setdefault(case["op"], []).append(case)
    print(f"ONNX node conformance, backend {args.backend}: cases passing per operator "
          f"(int8 within 6%, bf16 within 2% of max |y|)")
    rows = []
    totals = collections.Counter()
    for op, cases in by_op.items():
        if not cases:
            continue
        cannot = sum(1 for c in cases if c["name"] in CANNOT_PASS)
        cells = []
        for p in precisions:
            n = sum(1 for c in cases if verdicts.get(c["name"], {}).get(p, ("",))[0] == "pass")
            totals[p] += n
            cells.append(n)
        totals["cases"] += len(cases)
        totals["cannot"] += cannot
        rows.append((op, len(cases), cannot, cells))
    rows.append(("total", totals["cases"], totals["cannot"], [totals[p] for p in precisions]))
    if args.markdown:
        print("| operator | cases | cannot pass | " + " | ".join(precisions) + " |")
        print("|---|--:|--:|" + "--:|" * len(precisions))
        for op, n, cannot, cells in rows:
            b = "**" if op == "total" else ""
            print(f"| {b}{op}{b} | {b}{n}{b} | {b}{cannot}{b} | " + " | ".join(f"{b}{c}{b}" for c in cells) + " |")
    else:
        print(f"{'operator':20s} {'cases':>5s} {'cannot':>6s} " + " ".join(f"{p:>5s}" for p in precisions))
        for op, n, cannot, cells in rows:
            print(f"{op:20s} {n:5d} {cannot:6d} " + " ".join(f"{c:5d}" for c in cells))
    if totals["cases"]:
        print("passing: " + ", ".join(f"{p} {totals[p]} of {totals['cases']} ({totals[p] / totals['cases']:.2f})"
                                      for p in precisions))
    print(f"\nprecision limits ({len(PRECISION_LIMITS)}; an answer outside the tolerance is expected):")
    for name, why in PRECISION_LIMITS.items():
        print(f"  {name:50s} {why}")
    here = {c["name"] for c in index}
    print(f"\ncannot pass ({sum(1 for n in CANNOT_PASS if n in here)}):")
    for name, why in CANNOT_PASS.items():
        if name in here:
            print(f"  {name:50s} {why}")

    # Verdicts that fail the test.
    problems = []
    for name, per in verdicts.items():
        for p, (v, msg) in per.items():
            if v in ("BADMSG", "CRASH") or (v == "WRONG" and name not in PRECISION_LIMITS):
                problems.append(f"{name} [{p}]: {v}: {msg}")
            if expected.get(name, {}).get(p) == "pass" and v != "pass":
                problems.append(f"{name} [{p}]: regressed (expected pass): {v}: {msg}")
    improved = [f"{n} [{p}]" for n, per in verdicts.items() for p, (v, _) in per.items()
                if v == "pass" and expected.get(n, {}).get(p) != "pass"]

    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(
            {n: {p: {"verdict": v, "message": m} for p, (v, m) in per.items()} for n, per in verdicts.items()},
            indent=1) + "\n")
    if args.update:
        table = dict(expected)
        for n, per in verdicts.items():
            for p, (v, _) in per.items():
                table.setdefault(n, {})[p] = "pass" if v == "pass" else "refused"
        lines = [f" {json.dumps(n)}: {json.dumps(table[n], sort_keys=True)}" for n in sorted(table)]
        exp_path.write_text("{\n" + ",\n".join(lines) + "\n}\n")
        print(f"\nwrote {exp_path}")
    if improved and not args.update:
        print(f"\nnewly passing (run with --update to record): {', '.join(improved)}")
    if problems:
        print("\nFAILED:")
        for pr in problems:
            print("  " + pr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
