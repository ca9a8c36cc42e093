#!/usr/bin/env bash
# Lattice ECP5 synthesis with Yosys 0.23 (synth_ecp5) and a resource report.
#   usage: scripts/fpga/ecp5.sh [device|ulx3s] [output-dir]
#     device  tpu_top alone, N=16, UB 4096 x 16 B, WB 1024, ACC 1024 x 64 B, 128-bit DMA, int8-only
#             (EnableBf16 0, as on the boards; the array size to compare with other targets; its
#             ~330 multipliers exceed the LFE5U-85F's 156 MULT18X18D, see docs/fpga.md; the
#             bf16 array's cost is scripts/fpga/array.sh's)
#     ulx3s   rtl/fpga/tpu_ulx3s_top.sv: the device + UART bridge + 128 KiB host memory in EBR,
#             with the parameters of that top (constraints/ulx3s.lpf for pins)
# Debian 12 ships no nextpnr-ecp5 (nor prjtrellis' ecppack): this stops after synthesis, so there
# is no placed design, bitstream or Fmax here. The JSON netlist (synth.json) is what
#   nextpnr-ecp5 --85k --package CABGA381 --lpf constraints/ulx3s.lpf --json synth.json ...
# would take on a machine that has it.
# Writes <out>/stat.txt (Yosys stat) and <out>/resources.txt (key=value). Exits non-zero on error.
# Environment: YOSYS, ECP5_PARAMS (override the chparam list of the device variant).
set -euo pipefail
cap_lut=""  # board variants: the part's capacity, checked after synthesis
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

variant="${1:-device}"
out="${2:-$(mktemp -d /tmp/tpuw_ecp5.XXXXXX)}"
mkdir -p "${out}"
tag="ecp5(${variant})"

case "${variant}" in
  device)
    fpga_sources "${FPGA_RTL}/tpu.f"
    top=tpu_top
    params="${ECP5_PARAMS:--set ArrayN 16 -set UbDepth 4096 -set WbDepth 1024 -set AccDepth 1024 -set DmaDataW 128 -set QueueDepth 8 -set AxiIdW 4 -set EnableBf16 0}"
    chparam="chparam ${params} tpu_top"
    synth_opt=""
    ;;
  ulx3s)
    fpga_sources "${FPGA_RTL}/tpu.f" "${FPGA_RTL}/fpga/fpga.f"
    FPGA_FILES+=("${FPGA_RTL}/fpga/tpu_ulx3s_top.sv")
    top=tpu_ulx3s_top
    cap_lut=83640 cap_dsp=156 cap_bram=208  # LFE5U-85F
    chparam=""
    synth_opt=""
    ;;
  *) echo "usage: $0 [device|ulx3s] [output-dir]" >&2; exit 2 ;;
esac

{
  echo "read_verilog -sv -DSYNTHESIS -DTPU_FPGA_RAM ${FPGA_INCS[*]} ${FPGA_FILES[*]}"
  [[ -n "${chparam}" ]] && echo "${chparam}"
  echo "synth_ecp5 -top ${top} ${synth_opt} -json ${out}/synth.json"
  echo "tee -o ${out}/stat.txt stat"
} > "${out}/synth.ys"

fpga_yosys "${tag}" "${out}" "${out}/synth.ys"

# LUT4 (TRELLIS_COMB/LUT4), flip-flops (TRELLIS_FF), 18x18 multipliers, 18 kbit EBR, LUT RAM.
cell() { fpga_stat_sum "${out}/stat.txt" "^$1\$"; }
luts=$(( $(cell LUT4) + $(cell TRELLIS_COMB) ))
ffs=$(( $(cell TRELLIS_FF) + $(cell FD1S3AX) + $(cell FD1S3BX) + $(cell FD1P3AX) + $(cell FD1P3BX) + $(cell FD1P3DX) + $(cell FD1P3IX) + $(cell FD1S3DX) + $(cell FD1S3IX) ))
dsp=$(( $(cell MULT18X18D) + $(cell ALU54B) ))
bram=$(cell DP16KD)
lutram=$(cell TRELLIS_DPR16X4)
ccu2=$(cell CCU2C)
{
  echo "target=ecp5 variant=${variant} top=${top}"
  echo "luts=${luts} ffs=${ffs} dsp=${dsp} bram=${bram} lutram=${lutram} carry=${ccu2}"
  if [[ -n "${cap_lut}" ]]; then echo "capacity: luts=${cap_lut} dsp=${cap_dsp} bram=${cap_bram}"; fi
} | tee "${out}/resources.txt"
[[ "${luts}" -gt 0 ]] || fpga_fail "${tag}" "no LUTs in the netlist"
fpga_check_capacity "${tag}"
echo "${tag}: ok (synthesis only: Debian has no nextpnr-ecp5, so no Fmax)"
