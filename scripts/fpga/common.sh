# Shared by the FPGA flow scripts (sourced, not run). Turns the ordered file lists into Yosys
# arguments and provides the log/fail helpers.
#   fpga_sources <file list>...   sets the arrays FPGA_INCS (-I...) and FPGA_FILES (absolute
#                                 paths) from rtl/tpu.f-style lists (paths relative to rtl/).
# The device is always read with -DTPU_FPGA_RAM: tpu_datapath then builds its UB/WB/ACC from
# one-read-one-write RAMs that Yosys maps to block RAM (see rtl/core/tpu_datapath.sv).
FPGA_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
FPGA_RTL="${FPGA_ROOT}/rtl"
YOSYS="${YOSYS:-yosys}"

source "${FPGA_ROOT}/scripts/rtl_files.sh"

fpga_sources() {
  rtl_file_lists "$@"
  FPGA_INCS=("${RTL_INCDIRS[@]/#/-I}")
  FPGA_FILES=("${RTL_FILES[@]}")
}

# fpga_stat_sum <stat file> <regex>: the summed counts of the cells whose name matches, in the last
# block of a Yosys `stat` report (the design totals when the design is hierarchical).
fpga_stat_sum() {
  awk -v re="$2" '/^=== / { n = 0 } $1 ~ re && $2 ~ /^[0-9]+$/ { n += $2 } END { print n + 0 }' "$1"
}

# fpga_check_capacity <tag>: for board variants (cap_lut set), fails unless luts, dsp and bram fit
# the part. Uses the caller's variables luts dsp bram cap_lut cap_dsp cap_bram.
fpga_check_capacity() {
  [[ -n "${cap_lut}" ]] || return 0
  if ! awk -v l="${luts}" -v d="${dsp}" -v b="${bram}" \
       -v cl="${cap_lut}" -v cd="${cap_dsp}" -v cb="${cap_bram}" 'BEGIN { exit !(l <= cl && d <= cd && b <= cb) }'; then
    fpga_fail "$1" "exceeds the board's part (LUT ${luts}/${cap_lut}, DSP ${dsp}/${cap_dsp}, BRAM ${bram}/${cap_bram})"
  fi
}

fpga_fail() {
  echo "$1: FAILED ($2)" >&2
  exit 1
}

# fpga_yosys <tag> <out dir> <script file>: runs Yosys quietly with a log, fails loudly.
fpga_yosys() {
  local tag="$1" out="$2" script="$3"
  echo "${tag}: yosys $("${YOSYS}" -V | awk '{print $2}'), log in ${out}/yosys.log"
  if ! "${YOSYS}" -q -l "${out}/yosys.log" -s "${script}" > /dev/null 2>&1; then
    grep -E "ERROR" "${out}/yosys.log" | head -20 >&2 || true
    fpga_fail "${tag}" "yosys"
  fi
  echo "${tag}: $(grep -c '^Warning:' "${out}/yosys.log" || true) Yosys warnings (see the log)"
}
