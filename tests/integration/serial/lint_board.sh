#!/usr/bin/env bash
# verilator --lint-only -Wall on the board tops (rtl/fpga/tpu_{icebreaker,arty,ulx3s}_top.sv, each
# with its own array size and area knobs): rtl/tpu.f then rtl/fpga/fpga.f, waivers rtl/lint/*.vlt.
# Zero warnings required, in both memory forms: the simulation RAMs and the FPGA RAMs
# (TPU_FPGA_RAM, as the bitstream and the verilated board are built).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
rtl="${root}/rtl"
source "${root}/scripts/rtl_files.sh"
rtl_file_lists "${rtl}/tpu.f" "${rtl}/fpga/fpga.f"
args=("${RTL_INCDIRS[@]/#/+incdir+}" "${RTL_FILES[@]}")
for top in tpu_icebreaker_top tpu_arty_top tpu_ulx3s_top; do
  files=("${args[@]}")  # fpga.f lists the iCEBreaker top; the others are added here
  [[ " ${files[*]} " == *"/fpga/${top}.sv "* ]] || files+=("${rtl}/fpga/${top}.sv")
  for define in "" "+define+TPU_FPGA_RAM"; do
    "${VERILATOR:-verilator}" --lint-only -Wall --top-module "${top}" ${define} \
      "${rtl}"/lint/*.vlt "${files[@]}" "$@"
    echo "lint: ${top} ${define:-(simulation RAMs)} clean"
  done
done
