"""What the tpuw CLI integration scripts share: run the binary, check a condition, write inputs.

    sys.path.insert(0, <tests/integration>)
    from tpuw_cli_harness import CliHarness, expect
    cli = CliHarness(tpuw_path, "tpuw_run_")   # a fresh temporary directory for the case's files
    rc, stdout, stderr = cli.run("info", "--json")
"""
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np


def expect(cond, msg):
    """Fails the case (exit 1) with msg unless cond holds."""
    if not cond:
        print("FAIL:", msg)
        sys.exit(1)


def mpi_env():
    """The environment for `mpirun -np 2 --oversubscribe tpuw ...` in tests: root allowed (CI runs
    as root), oversubscription on 2 cores, and under ASan no leak check: OpenMPI 4.1 leaks in
    MPI_Init from its dlopen'ed components (frames LSan reports as "<unknown module>", which a
    suppression file cannot name). ASan's memory errors and UBSan stay on; the in-process
    MirroredTrainer tests keep the leak check on the trainer's own code."""
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")
    if "ASAN_OPTIONS" in env:
        env["ASAN_OPTIONS"] += ":detect_leaks=0"
    return env



def run_mpi(tpuw, np_, args, timeout=280):
    """`mpirun -np NP --oversubscribe TPUW ARGS` with mpi_env(): (exit code, stdout, stderr, seconds).
    Exits 77 (ctest's skip) when there is no mpirun or tpuw is built without MPI."""
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        print("SKIP: no mpirun")
        sys.exit(77)
    t0 = time.monotonic()
    p = subprocess.run([mpirun, "-np", str(np_), "--oversubscribe", tpuw, *args], capture_output=True, text=True,
                       timeout=timeout, env=mpi_env())
    if "built without MPI" in p.stderr:
        print("SKIP: tpuw is built without MPI")
        sys.exit(77)
    return p.returncode, p.stdout, p.stderr, time.monotonic() - t0


class CliHarness:
    def __init__(self, tpuw, tmp_prefix):
        self.tpuw = tpuw
        self.tmp = tempfile.mkdtemp(prefix=tmp_prefix)

    def run(self, *args):
        """(exit code, stdout, stderr) of `tpuw args...`."""
        p = subprocess.run([self.tpuw, *args], capture_output=True, text=True, timeout=280)
        return p.returncode, p.stdout, p.stderr

    def run_ok(self, *args):
        """stdout of `tpuw args...`, which must exit 0."""
        rc, so, se = self.run(*args)
        expect(rc == 0, f"{args}: exit {rc}; stdout: {so} stderr: {se}")
        return so

    def save(self, name, arr):
        """Writes arr as <tmp>/name (.npy); returns the path."""
        p = os.path.join(self.tmp, name)
        np.save(p, arr)
        return p

    def write(self, name, data):
        """Writes raw bytes as <tmp>/name; returns the path."""
        p = os.path.join(self.tmp, name)
        with open(p, "wb") as f:
            f.write(data)
        return p
