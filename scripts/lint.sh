#!/usr/bin/env bash
# Lint the device: verilator --lint-only -Wall on tpu_top, using the ordered file list rtl/tpu.f
# and the waiver files rtl/lint/*.vlt. Zero warnings required: exits non-zero on any warning.
# Both device configurations of cmake/TpuwConfigs.cmake are linted (N=16/128-bit DMA and
# N=4/64-bit DMA), since generate branches differ between them.
#   usage: scripts/lint.sh [extra verilator args...]
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
rtl="${root}/rtl"
verilator="${VERILATOR:-verilator}"

source "${root}/scripts/rtl_files.sh"
rtl_file_lists "${rtl}/tpu.f"
args=("${RTL_INCDIRS[@]/#/+incdir+}" "${RTL_FILES[@]}")

waivers=("${rtl}"/lint/*.vlt)

configs=(
  "-GArrayN=16 -GUbDepth=32768 -GWbDepth=4096 -GAccDepth=4096 -GDmaDataW=128 -GQueueDepth=8"
  "-GArrayN=4 -GUbDepth=2048 -GWbDepth=512 -GAccDepth=1024 -GDmaDataW=64 -GQueueDepth=8"
)

status=0
for cfg in "${configs[@]}"; do
  echo "lint: tpu_top ${cfg}"
  # shellcheck disable=SC2086
  if ! "${verilator}" --lint-only -Wall --top-module tpu_top ${cfg} "${waivers[@]}" \
       "${args[@]}" "$@"; then
    status=1
  fi
done

if [[ ${status} -ne 0 ]]; then
  echo "lint: FAILED" >&2
else
  echo "lint: clean"
fi
exit ${status}
