#!/usr/bin/env bash
# verilator --lint-only -Wall on rtl/fpga/tpu_icebreaker_top.sv: rtl/tpu.f then rtl/fpga/fpga.f,
# waivers rtl/lint/*.vlt. Zero warnings required.
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
"${VERILATOR:-verilator}" --lint-only -Wall --top-module tpu_icebreaker_top "${rtl}"/lint/*.vlt "${args[@]}" "$@"
echo "lint: tpu_icebreaker_top clean"
