#!/usr/bin/env bash
# Resources of the processing element and the matrix unit alone, int8-only or int8+bf16, on ECP5
# (synth_ecp5) or Xilinx 7-series (synth_xilinx -family xc7), Yosys 0.23, no I/O buffers.
#   usage: scripts/fpga/array.sh <ecp5|xc7> <pe|mxu|fp32_add|bf16_mul> <EnableBf16: 0|1> [ArrayN] [output-dir]
#     pe        tpu_pe (one processing element)
#     mxu       tpu_mxu, ArrayN x ArrayN (default 4), TagW 1
#     fp32_add  the fp32 adder cell alone (rtl/prim/tpu_fp32_add.sv; EnableBf16 ignored)
#     bf16_mul  the bf16 multiplier cell alone (rtl/prim/tpu_bf16_mul.sv; EnableBf16 ignored)
# Writes <out>/stat.txt (Yosys stat) and <out>/resources.txt (key=value):
#   ecp5: luts (LUT4) carry (CCU2C) dsp (MULT18X18D) ffs (TRELLIS_FF)
#   xc7:  luts (LUT1..6) carry (CARRY4) dsp (DSP48E1) ffs (FDRE/FDSE/FDCE/FDPE)
# Exits non-zero on a tool error. Environment: YOSYS.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

arch="${1:-}"
unit="${2:-}"
bf16="${3:-}"
n="${4:-4}"
out="${5:-$(mktemp -d /tmp/tpuw_array.XXXXXX)}"
case "${arch}/${unit}/${bf16}" in
  ecp5/pe/[01] | ecp5/mxu/[01] | ecp5/fp32_add/[01] | ecp5/bf16_mul/[01]) ;;
  xc7/pe/[01] | xc7/mxu/[01] | xc7/fp32_add/[01] | xc7/bf16_mul/[01]) ;;
  *) echo "usage: $0 <ecp5|xc7> <pe|mxu|fp32_add|bf16_mul> <0|1> [ArrayN] [output-dir]" >&2; exit 2 ;;
esac
mkdir -p "${out}"
tag="${arch}(${unit}, EnableBf16=${bf16})"
[[ "${unit}" != mxu ]] || tag="${arch}(${unit}, EnableBf16=${bf16}, N=${n})"

FPGA_INCS=("-I${FPGA_RTL}/include")
FPGA_FILES=("${FPGA_RTL}/pkg/tpu_fp_pkg.sv" "${FPGA_RTL}/core/tpu_delay.sv" "${FPGA_RTL}/core/tpu_pe.sv"
            "${FPGA_RTL}/core/tpu_mxu.sv" "${FPGA_RTL}/prim/tpu_fp32_add.sv" "${FPGA_RTL}/prim/tpu_bf16_mul.sv")
case "${unit}" in
  pe)  top=tpu_pe;  chparam="chparam -set EnableBf16 ${bf16} tpu_pe" ;;
  mxu) top=tpu_mxu; chparam="chparam -set EnableBf16 ${bf16} -set ArrayN ${n} -set TagW 1 tpu_mxu" ;;
  *)   top="tpu_${unit}"; chparam="" ;;
esac
case "${arch}" in
  ecp5) synth="synth_ecp5 -top ${top}" ;;
  xc7)  synth="synth_xilinx -family xc7 -top ${top} -noiopad" ;;
esac
{
  echo "read_verilog -sv -DSYNTHESIS ${FPGA_INCS[*]} ${FPGA_FILES[*]}"
  [[ -z "${chparam}" ]] || echo "${chparam}"
  echo "${synth}"
  echo "tee -o ${out}/stat.txt stat"
} > "${out}/synth.ys"

start=$(date +%s)
fpga_yosys "${tag}" "${out}" "${out}/synth.ys"
secs=$(( $(date +%s) - start ))

sum() { fpga_stat_sum "${out}/stat.txt" "$1"; }
case "${arch}" in
  ecp5)
    luts=$(( $(sum '^LUT4$') + $(sum '^TRELLIS_COMB$') ))
    carry=$(sum '^CCU2C$')
    dsp=$(( $(sum '^MULT18X18D$') + $(sum '^ALU54B$') ))
    ffs=$(( $(sum '^TRELLIS_FF$') + $(sum '^FD1[SP]3[A-Z]X$') ))
    ;;
  xc7)
    luts=$(sum '^LUT[1-6]$')
    carry=$(sum '^CARRY4$')
    dsp=$(sum '^DSP48E1$')
    ffs=$(sum '^FD(RE|SE|CE|PE)$')
    ;;
esac
{
  echo "target=${arch} unit=${unit} enable_bf16=${bf16} array_n=${n}"
  echo "luts=${luts} carry=${carry} dsp=${dsp} ffs=${ffs} seconds=${secs}"
} | tee "${out}/resources.txt"
[[ "${luts}" -gt 0 ]] || fpga_fail "${tag}" "no LUTs in the netlist"
