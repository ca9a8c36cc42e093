#!/usr/bin/env bash
# verilator --lint-only -Wall on rtl/fpga/tpu_icebreaker_top.sv: rtl/tpu.f then rtl/fpga/fpga.f,
# waivers rtl/lint/*.vlt. Zero warnings required, in both memory forms: the simulation RAMs and the
# FPGA RAMs (TPU_FPGA_RAM, as the bitstream and the verilated board are built).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
rtl="${root}/rtl"
args=()
for list in "${rtl}/tpu.f" "${rtl}/fpga/fpga.f"; do
  while IFS= read -r line; do
    line="${line%%//*}"
    line="$(echo "${line}" | xargs)"
    [[ -z "${line}" ]] && continue
    if [[ "${line}" == +incdir+* ]]; then
      args+=("+incdir+${rtl}/${line#+incdir+}")
    else
      args+=("${rtl}/${line}")
    fi
  done < "${list}"
done
for define in "" "+define+TPU_FPGA_RAM"; do
  "${VERILATOR:-verilator}" --lint-only -Wall --top-module tpu_icebreaker_top ${define} \
    "${rtl}"/lint/*.vlt "${args[@]}" "$@"
  echo "lint: tpu_icebreaker_top ${define:-(simulation RAMs)} clean"
done
