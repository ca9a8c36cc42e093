# Reads the ordered RTL file lists (rtl/tpu.f, rtl/fpga/fpga.f: one path per line relative to rtl/,
# `//` comments, `+incdir+` lines). Sourced, not run; one parser for every script that hands the
# RTL to a tool (lint, Yosys, the FPGA flows), each formatting the result its tool's way.
#   rtl_file_lists <list>...   sets RTL_INCDIRS and RTL_FILES (absolute paths, in order)
RTL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/../rtl" && pwd)"

rtl_file_lists() {
  RTL_INCDIRS=()
  RTL_FILES=()
  local list line
  for list in "$@"; do
    while IFS= read -r line; do
      line="${line%%//*}"
      line="$(echo "${line}" | xargs)"
      [[ -z "${line}" ]] && continue
      if [[ "${line}" == +incdir+* ]]; then
        RTL_INCDIRS+=("${RTL_DIR}/${line#+incdir+}")
      else
        RTL_FILES+=("${RTL_DIR}/${line}")
      fi
    done < "${list}"
  done
}
