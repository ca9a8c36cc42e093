#!/usr/bin/python3
"""ONNX node conformance of `tpuw run` (issue 13; docs/conformance.md). Needs only NumPy.

    run_conformance.py TPUW [--backend ref|rtl] [--precision int8,bf16] [--only-passing]
                            [--expected FILE] [--update] [--cases DIR] [--json FILE]

Every case under cases/ (exported by scripts/gen_conformance.py from ONNX's own node tests: one
operator, its first input as the model's input, the other inputs initializers) runs through
`tpuw run MODEL -i input.npy -o out.npy --backend B --precision P --check` and gets one verdict:

    pass   exit 0 and the output within the tolerance of ONNX's expected output:
           max |out - expected| <= tol * max |expected| (int8 6%, calibrated on the test input;
           bf16 2%); a further output (MaxPool's int64 Indices) exactly ONNX's
    refused exit 2 with a message naming the node and its operator, or the graph input/output
           a graph-level limit is about (a clean refusal)
    WRONG  exit 0 with an output off by more than the tolerance, or of the wrong size
    BADMSG exit 2 with a message that names neither
    CRASH  any other exit (a signal, an internal error, --check's exit 3)

Cases a batch-oriented accelerator cannot run are declared not applicable (not_applicable()
below, with the reason); they still run and must not crash or answer wrongly, but are not
counted. The test fails on any WRONG, BADMSG or CRASH, and when a case the expected table
(expected.json, per case and precision: "pass" or "refused") lists as passing no longer passes.
Newly passing cases are reported; --update rewrites the table.
"""
import argparse
import collections
import json
import os
import pathlib
import subprocess
import sys
import tempfile

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
TOLERANCE = {"int8": 0.06, "bf16": 0.02}

# Operators in the order of issue 13's list (Gelu is not in onnx 1.12's node tests).
OP_ORDER = ("Conv MaxPool AveragePool GlobalAveragePool BatchNormalization Add Mul Div Sub Concat Clip Relu "
            "LeakyRelu Sigmoid Tanh HardSigmoid HardSwish Gelu Erf Flatten Reshape Transpose Squeeze Unsqueeze "
            "Gemm MatMul Softmax LogSoftmax LayerNormalization Pad").split()


# Cases whose inputs the device's number formats cannot represent: a WRONG answer here is the
# precision's limit, not a bug. Listed with the reason; they still must not crash. None today:
# test_softmax_large_number and test_logsoftmax_large_number (10000..10003 next to 0..3) were the
# two until host operators on the graph input ran on the raw fp32 rows before the device
# (docs/network_compiler.md, "Host operators").
PRECISION_LIMITS = {}


def not_applicable(case):
    """The reason a case cannot apply to a batch-oriented accelerator (axis 0 of the runtime input
    is the batch: rows are independent and any number of them may come), or None."""
    ins, outs, op, attrs = case["input_shape"], case["output_shape"], case["op"], case["attributes"]
    rank = len(ins)
    if rank < 2:
        return f"{rank}-D input: no batch dimension"
    if ins[0] == 0:
        return "empty input (batch 0)"
    if len(outs) < 1 or outs[0] != ins[0]:
        return f"output {outs} does not keep the input's batch dimension ({ins[0]} rows of {ins})"
    if op in ("Conv", "MaxPool", "AveragePool") and rank != 4:
        return f"{rank - 2}-D spatial operator (the device runs 2-D convolutions and pools)"
    if op in ("Softmax", "LogSoftmax", "LayerNormalization") and "axis" in attrs:
        axis = attrs["axis"] + rank if attrs["axis"] < 0 else attrs["axis"]
        if axis == 0:
            return f"axis {attrs['axis']} is the batch axis (rows are not independent)"
    if op == "BatchNormalization" and attrs.get("training_mode", 0):
        return "training_mode=1: statistics over the batch (rows are not independent)"
    # A constant operand that varies along the batch axis fixes the batch size and makes row i
    # depend on i: elementwise operands, Concat's other inputs, Gemm's C, a batched MatMul's B.
    for pos, shape in case["constants"]:
        batched = (op in ("Add", "Sub", "Mul", "Div", "Concat") or (op == "Gemm" and pos == 2)
                   or (op == "MatMul" and len(shape) >= 3))
        if batched and len(shape) == len(outs) and shape[0] > 1:
            return f"constant input {pos} of shape {shape} varies along the batch axis"
    return None


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
        if ("node '" in msg and f"({op})" in msg) or "graph input '" in msg or "graph output '" in msg:
            return "refused", msg
        return "BADMSG", msg
    if p.returncode != 0:
        return "CRASH", f"exit {p.returncode}: {msg}"
    expected = np.load(case_dir / "expected.npy").astype(np.float64).ravel()
    try:
        got = np.load(files[0]).astype(np.float64).ravel()
    except (OSError, ValueError) as e:
        return "WRONG", f"no output: {e}"
    if got.size != expected.size:
        return "WRONG", f"output has {got.size} values, expected {expected.size}"
    # Further outputs are integers (MaxPool's Indices): exactly ONNX's.
    for name, f in zip(names[1:], files[1:]):
        want = np.load(case_dir / f"expected.{name}.npy")
        try:
            extra = np.load(f)
        except (OSError, ValueError) as e:
            return "WRONG", f"no output '{name}': {e}"
        if extra.dtype != want.dtype or extra.shape != want.shape or not np.array_equal(extra, want):
            return "WRONG", f"output '{name}' ({extra.dtype} {list(extra.shape)}) differs from ONNX's ({want.dtype} {list(want.shape)})"
    scale = float(np.max(np.abs(expected))) if expected.size else 0.0
    err = float(np.max(np.abs(got - expected))) if expected.size else 0.0
    rel = err / scale if scale > 0 else err
    if rel <= TOLERANCE[precision]:
        return "pass", f"max error {rel:.4f} of max |y|"
    return "WRONG", f"max error {rel:.4f} of max |y| (tolerance {TOLERANCE[precision]})"


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
    ap.add_argument("-v", "--verbose", action="store_true", help="print every case's verdict")
    args = ap.parse_args()

    cases_dir = pathlib.Path(args.cases)
    index = json.loads((cases_dir / "index.json").read_text())
    precisions = args.precision.split(",")
    exp_path = pathlib.Path(args.expected)
    expected = json.loads(exp_path.read_text()) if exp_path.exists() else {}

    verdicts = {}  # name -> precision -> (verdict, message)
    with tempfile.TemporaryDirectory() as tmp:
        for case in index:
            name = case["name"]
            for prec in precisions:
                if args.only_passing and expected.get(name, {}).get(prec) != "pass":
                    continue
                v = run_case(args.tpuw, cases_dir / name, case, args.backend, prec, tmp)
                verdicts.setdefault(name, {})[prec] = v
                if args.verbose:
                    print(f"{name:50s} {prec:5s} {v[0]:8s} {v[1]}")

    # Per-operator table.
    by_op = collections.OrderedDict((op, []) for op in OP_ORDER)
    for case in index:
        by_op.setdefault(case["op"], []).append(case)
    na = [(c, not_applicable(c)) for c in index if not_applicable(c)]
    na_names = {c["name"] for c, _ in na}
    print(f"ONNX node conformance, backend {args.backend}: cases passing per operator "
          f"(int8 within 6%, bf16 within 2% of max |y|)")
    hdr = f"{'operator':20s} {'cases':>5s} {'n/a':>4s} " + " ".join(f"{p:>5s}" for p in precisions)
    print(hdr)
    totals = collections.Counter()
    for op, cases in by_op.items():
        if not cases:
            continue
        app = [c for c in cases if c["name"] not in na_names]
        row = f"{op:20s} {len(cases):5d} {len(cases) - len(app):4d} "
        cells = []
        for p in precisions:
            n = sum(1 for c in cases if verdicts.get(c["name"], {}).get(p, ("",))[0] == "pass")
            totals[p] += n
            cells.append(f"{n:5d}")
        totals["cases"] += len(cases)
        totals["na"] += len(cases) - len(app)
        print(row + " ".join(cells))
    print(f"{'total':20s} {totals['cases']:5d} {totals['na']:4d} " + " ".join(f"{totals[p]:5d}" for p in precisions))
    print(f"\nprecision limits ({len(PRECISION_LIMITS)}; an answer outside the tolerance is expected):")
    for name, why in PRECISION_LIMITS.items():
        print(f"  {name:50s} {why}")
    print(f"\nnot applicable ({len(na)}):")
    for c, why in na:
        print(f"  {c['name']:50s} {why}")

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
