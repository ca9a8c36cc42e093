#!/usr/bin/env bash
# Install what this project needs from Debian 12's packages (only what is missing), then configure
# and build it. Used by the README's two commands and by CI.
#
#   scripts/setup.sh [BUILD_DIR]      default BUILD_DIR: build
#
# Environment: TPUW_JOBS (parallel build jobs, default: number of cores), TPUW_WERROR=1 to build
# with -Werror (CI does).
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${1:-build}

packages=(
  build-essential cmake ninja-build ccache git
  verilator yosys
  libgtest-dev libgmock-dev libbenchmark-dev libfmt-dev libcli11-dev nlohmann-json3-dev
  libonnx-dev libprotobuf-dev protobuf-compiler
  nextpnr-ice40 fpga-icestorm
  python3 python3-numpy dataset-fashion-mnist
  python3-torch python3-torchvision python3-onnx  # torchvision families (tests/integration/torchvision)
  libopenmpi-dev openmpi-bin
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

werror=OFF
[ "${TPUW_WERROR:-0}" = 1 ] && werror=ON
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTPUW_WERROR="$werror"
cmake --build "$build_dir" -j "${TPUW_JOBS:-$(nproc)}"
