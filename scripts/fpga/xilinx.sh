#!/usr/bin/env bash
# Xilinx 7-series synthesis with Yosys 0.23 (synth_xilinx -family xc7) and a resource report.
#   usage: scripts/fpga/xilinx.sh [device|arty] [output-dir]
#     device  tpu_top alone, N=16, UB 4096 x 16 B, WB 1024, ACC 1024 x 64 B, 128-bit DMA, int8-only
#             (EnableBf16 0, as on the boards; the bf16 array: scripts/fpga/array.sh)
#             (a core: no I/O buffers; about 330 DSP48E1: a Kintex-7-class part)
#     arty    rtl/fpga/tpu_arty_top.sv: the device + UART bridge + 128 KiB host memory in block
#             RAM, with the parameters of that top (constraints/arty_a7_35t.xdc for pins)
# There is no Vivado here and the open 7-series place-and-route (nextpnr-xilinx / F4PGA) is not
# in Debian: this stops after synthesis, so there is no bitstream or Fmax. The EDIF netlist
# (synth.edif) can be read by Vivado (read_edif, link_design -part xc7a35ticsg324-1L, then
# read_xdc constraints/arty_a7_35t.xdc, place_design, route_design, write_bitstream).
# Writes <out>/stat.txt (Yosys stat) and <out>/resources.txt (key=value). Exits non-zero on error.
# Environment: YOSYS, XILINX_PARAMS (override the chparam list of the device variant).
set -euo pipefail
cap_lut=""  # board variants: the part's capacity, checked after synthesis
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

variant="${1:-device}"
out="${2:-$(mktemp -d /tmp/tpuw_xilinx.XXXXXX)}"
mkdir -p "${out}"
tag="xilinx(${variant})"

case "${variant}" in
  device)
    fpga_sources "${FPGA_RTL}/tpu.f"
    top=tpu_top
    params="${XILINX_PARAMS:--set ArrayN 16 -set UbDepth 4096 -set WbDepth 1024 -set AccDepth 1024 -set DmaDataW 128 -set QueueDepth 8 -set AxiIdW 4 -set EnableBf16 0}"
    chparam="chparam ${params} tpu_top"
    iopad="-noiopad"
    ;;
  arty)
    fpga_sources "${FPGA_RTL}/tpu.f" "${FPGA_RTL}/fpga/fpga.f"
    FPGA_FILES+=("${FPGA_RTL}/fpga/tpu_arty_top.sv")
    top=tpu_arty_top
    cap_lut=20800 cap_dsp=90 cap_bram=50  # XC7A35T
    chparam=""
    iopad=""
    ;;
  *) echo "usage: $0 [device|arty] [output-dir]" >&2; exit 2 ;;
esac

{
  echo "read_verilog -sv -DSYNTHESIS -DTPU_FPGA_RAM ${FPGA_INCS[*]} ${FPGA_FILES[*]}"
  [[ -n "${chparam}" ]] && echo "${chparam}"
  echo "synth_xilinx -family xc7 -top ${top} ${iopad} -edif ${out}/synth.edif"
  echo "tee -o ${out}/stat.txt stat"
} > "${out}/synth.ys"

fpga_yosys "${tag}" "${out}" "${out}/synth.ys"

sum() { fpga_stat_sum "${out}/stat.txt" "$1"; }
luts=$(sum '^LUT[1-6]$')
ffs=$(sum '^FD(RE|SE|CE|PE)$')
dsp=$(sum '^DSP48E1$')
b36=$(sum '^RAMB36E1$')
b18=$(sum '^RAMB18E1$')
lutram=$(sum '^RAM(32|64|128|256)[XM0-9A-Z]*$')
carry=$(sum '^CARRY4$')
# Block RAM in RAMB36 equivalents (two RAMB18 per RAMB36), as the Artix-7 tables count them.
bram=$(awk -v a="${b36}" -v b="${b18}" 'BEGIN { printf "%g", a + b / 2 }')
{
  echo "target=xc7 variant=${variant} top=${top}"
  echo "luts=${luts} ffs=${ffs} dsp=${dsp} bram=${bram} ramb36=${b36} ramb18=${b18} lutram=${lutram} carry=${carry}"
  if [[ -n "${cap_lut}" ]]; then echo "capacity: luts=${cap_lut} dsp=${cap_dsp} bram=${cap_bram}"; fi
} | tee "${out}/resources.txt"
[[ "${luts}" -gt 0 ]] || fpga_fail "${tag}" "no LUTs in the netlist"
fpga_check_capacity "${tag}"
echo "${tag}: ok (synthesis only: no Vivado / open 7-series place-and-route here, so no Fmax)"
