#!/usr/bin/env bash
# Lattice iCE40 UP5K flow (iCEBreaker board): Yosys 0.23 synth_ice40 -> nextpnr-ice40 --up5k
# --package sg48 -> icepack. Produces a bitstream and a timing/utilization report.
#   usage: scripts/fpga/ice40.sh [mxu|icebreaker] [output-dir]
#     mxu         fpga/ice40/tpu_ice40_mxu_selftest.sv: the 4x4 MXU with on-chip stimulus and a
#                 signature on the UART TX pin. Fits; full flow: synth, place, route, icepack.
#     icebreaker  rtl/fpga/tpu_icebreaker_top.sv: the whole device + UART bridge + SPRAM host
#                 memory. Synthesized and checked against the UP5K's capacity; placed and packed
#                 only if it fits (at N=4 it needs about 13k LUT4 of 5280: it does not).
# Pins: constraints/icebreaker.pcf (used when present; otherwise nextpnr places the I/O freely
# and the script says so). Clock target: 12 MHz (the iCEBreaker oscillator), FREQ_MHZ overrides.
# Writes <out>/top.bin (bitstream), <out>/nextpnr.json (nextpnr --report), <out>/resources.txt
# (key=value: luts ffs dsp bram spram io fmax_mhz fits meets); when the design does not fit,
# <out>/modules.txt: LUT4/FF/DSP/EBR per instance subtree (scripts/fpga/breakdown.py). Exit status: 0 when the design
# fits the UP5K and meets the target frequency, 1 otherwise (or on any tool error).
# Environment: YOSYS, NEXTPNR (nextpnr-ice40), ICEPACK, FREQ_MHZ, SEED.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

variant="${1:-mxu}"
out="${2:-$(mktemp -d /tmp/tpuw_ice40.XXXXXX)}"
mkdir -p "${out}"
tag="ice40(${variant})"
nextpnr="${NEXTPNR:-nextpnr-ice40}"
icepack="${ICEPACK:-icepack}"
freq="${FREQ_MHZ:-12}"
seed="${SEED:-1}"
pcf="${FPGA_ROOT}/constraints/icebreaker.pcf"

case "${variant}" in
  mxu)
    FPGA_INCS=("-I${FPGA_RTL}/include")
    FPGA_FILES=("${FPGA_RTL}/pkg/tpu_fp_pkg.sv" "${FPGA_RTL}/core/tpu_delay.sv" "${FPGA_RTL}/core/tpu_pe.sv"
                "${FPGA_RTL}/core/tpu_mxu.sv" "${FPGA_ROOT}/fpga/ice40/tpu_ice40_mxu_selftest.sv")
    top=tpu_ice40_mxu_selftest
    dsp_opt=""  # 16 PE multipliers > the 8 SB_MAC16: all in logic
    ;;
  icebreaker)
    fpga_sources "${FPGA_RTL}/tpu.f" "${FPGA_RTL}/fpga/fpga.f"
    top=tpu_icebreaker_top
    dsp_opt="-dsp"
    ;;
  *) echo "usage: $0 [mxu|icebreaker] [output-dir]" >&2; exit 2 ;;
esac

# UP5K capacity (iCE40 UltraPlus family data sheet): 5280 LUT4/FF, 8 DSP, 30 EBR, 4 SPRAM.
CAP_LUT=5280; CAP_DSP=8; CAP_BRAM=30; CAP_SPRAM=4

{
  # TPU_ICE40_SPRAM: the board's host memory in the UP5K's SPRAM (rtl/fpga/tpu_axi_sram.sv).
  echo "read_verilog -sv -DSYNTHESIS -DTPU_FPGA_RAM -DTPU_ICE40_SPRAM ${FPGA_INCS[*]} ${FPGA_FILES[*]}"
  echo "synth_ice40 -top ${top} ${dsp_opt} -json ${out}/synth.json"
  echo "tee -o ${out}/stat.txt stat"
} > "${out}/synth.ys"
fpga_yosys "${tag}" "${out}" "${out}/synth.ys"

cell() { fpga_stat_sum "${out}/stat.txt" "^$1\$"; }
luts=$(cell SB_LUT4); ffs=$(fpga_stat_sum "${out}/stat.txt" '^SB_DFF'); dsp=$(cell SB_MAC16)
bram=$(cell SB_RAM40_4K); spram=$(cell SB_SPRAM256KA)
fits=yes
if (( luts > CAP_LUT || dsp > CAP_DSP || bram > CAP_BRAM || spram > CAP_SPRAM )); then fits=no; fi

report() {  # report <fmax> <meets>
  {
    echo "target=ice40-up5k variant=${variant} top=${top}"
    echo "luts=${luts} ffs=${ffs} dsp=${dsp} bram=${bram} spram=${spram} fmax_mhz=$1 fits=${fits} meets=$2"
  } | tee "${out}/resources.txt"
}

if [[ "${fits}" != yes ]]; then
  report n/a n/a
  echo "${tag}: does not fit the UP5K after synthesis (LUT4 ${luts}/${CAP_LUT}, DSP ${dsp}/${CAP_DSP}, EBR ${bram}/${CAP_BRAM}, SPRAM ${spram}/${CAP_SPRAM}); not placed" >&2
  # Where the area goes: the same synthesis without flattening, totals per instance subtree.
  {
    head -1 "${out}/synth.ys"
    echo "synth_ice40 -top ${top} ${dsp_opt} -noflatten"
    echo "tee -q -o ${out}/stat_hier.txt stat"
  } > "${out}/synth_hier.ys"
  if "${YOSYS}" -q -l "${out}/yosys_hier.log" -s "${out}/synth_hier.ys" > /dev/null 2>&1; then
    python3 "${FPGA_ROOT}/scripts/fpga/breakdown.py" "${out}/stat_hier.txt" 4 > "${out}/modules.txt"
    echo "${tag}: per-instance breakdown before flattening (${out}/modules.txt):" >&2
    cat "${out}/modules.txt" >&2
  fi
  exit 1
fi

pnr_args=(--up5k --package sg48 --json "${out}/synth.json" --asc "${out}/top.asc"
          --report "${out}/nextpnr.json" --freq "${freq}" --seed "${seed}" --timing-allow-fail)
if [[ -f "${pcf}" ]]; then
  pnr_args+=(--pcf "${pcf}")
else
  echo "${tag}: constraints/icebreaker.pcf not found: I/O placed freely (bitstream not for a board)"
  pnr_args+=(--pcf-allow-unconstrained)
fi
echo "${tag}: nextpnr-ice40 (log in ${out}/nextpnr.log)"
if ! "${nextpnr}" "${pnr_args[@]}" > "${out}/nextpnr.log" 2>&1; then
  grep -E "ERROR|error" "${out}/nextpnr.log" | head -10 >&2 || true
  report n/a n/a
  fpga_fail "${tag}" "nextpnr-ice40"
fi
"${icepack}" "${out}/top.asc" "${out}/top.bin" || fpga_fail "${tag}" "icepack"

# Fmax and placed utilization from nextpnr's JSON report.
read -r fmax placed_luts < <(python3 - "${out}/nextpnr.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
fmax = min((v["achieved"] for v in r.get("fmax", {}).values()), default=0.0)
lc = r.get("utilization", {}).get("ICESTORM_LC", {}).get("used", 0)
print(f"{fmax:.1f} {lc}")
PY
)
meets=$(awk -v a="${fmax}" -v f="${freq}" 'BEGIN { print (a >= f) ? "yes" : "no" }')
report "${fmax}" "${meets}"
echo "${tag}: placed logic cells ${placed_luts}/${CAP_LUT}, Fmax ${fmax} MHz (target ${freq} MHz), bitstream ${out}/top.bin ($(stat -c %s "${out}/top.bin") bytes)"
[[ "${meets}" == yes ]] || fpga_fail "${tag}" "Fmax ${fmax} MHz below ${freq} MHz"
echo "${tag}: ok"
