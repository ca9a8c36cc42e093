#!/usr/bin/env bash
# Generic synthesis of tpu_top with Debian's Yosys 0.23 (the baseline every RTL file must pass).
# Reads the ordered file list rtl/tpu.f with `read_verilog -sv -DSYNTHESIS`, sets the parameters
# of a small configuration (N=4, 64-bit DMA, small memories so the run stays short), runs
# `synth -top tpu_top` and prints the cell statistics. Exits non-zero on any Yosys error.
#   usage: scripts/synth_yosys.sh [output-dir]      (default: a temporary directory)
# Environment: YOSYS (binary), SYNTH_PARAMS (override the chparam list).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
rtl="${root}/rtl"
yosys="${YOSYS:-yosys}"
out="${1:-$(mktemp -d /tmp/tpuw_synth.XXXXXX)}"
mkdir -p "${out}"

params="${SYNTH_PARAMS:--set ArrayN 4 -set UbDepth 64 -set WbDepth 16 -set AccDepth 32 -set DmaDataW 64 -set QueueDepth 4 -set AxiIdW 4}"

source "${root}/scripts/rtl_files.sh"
rtl_file_lists "${rtl}/tpu.f"
incs=("${RTL_INCDIRS[@]/#/-I}")
files=("${RTL_FILES[@]}")

script="${out}/synth.ys"
{
  echo "read_verilog -sv -DSYNTHESIS ${incs[*]} ${files[*]}"
  echo "chparam ${params} tpu_top"
  echo "synth -top tpu_top"
  echo "check -assert"
  echo "tee -o ${out}/stat.txt stat"
} > "${script}"

echo "synth: yosys $("${yosys}" -V | head -1), params: ${params}"
echo "synth: log in ${out}/yosys.log"
if ! "${yosys}" -q -l "${out}/yosys.log" -s "${script}" > /dev/null; then
  echo "synth: FAILED" >&2
  grep -E "ERROR|error" "${out}/yosys.log" | head -20 >&2 || true
  exit 1
fi
grep -E "Number of cells|Number of wires|Number of wire bits|\\\$_DFF|\\\$_SDFF" "${out}/stat.txt" \
  | tail -16 || true
echo "synth: ok"
