#!/bin/sh
# Synthesizes the int8-only tpu_mxu (ArrayN=4, TagW=4, EnableBf16=0; the bf16 array netlist is too
# large to simulate within the test timeout) with Yosys, then simulates the gate netlist against the RTL
# with Verilator on random stimulus.  Usage: run_mxu_equiv.sh <rtl dir> <work dir>
# -fno-gate: Verilator 5.006's gate optimizer mis-simulates some of Yosys' gate-level adder/multiplier
# netlists (Yosys' own `sat` on the same netlist gives the right values; -O0 or -fno-gate fix it).
# RTL simulation is not affected (tests/rtl checks it against C++ models).
set -eu
rtl=$1
work=$2
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work"
mkdir -p "$work"
cd "$work"
yosys -q -l yosys.log -p "
  read_verilog -sv -DSYNTHESIS -I$rtl/include $rtl/pkg/tpu_fp_pkg.sv $rtl/core/tpu_delay.sv $rtl/core/tpu_pe.sv $rtl/core/tpu_mxu.sv
  chparam -set ArrayN 4 -set TagW 4 -set EnableBf16 0 tpu_mxu
  hierarchy -check -top tpu_mxu
  synth -flatten
  rename -top tpu_mxu_gate
  write_verilog -noattr mxu_gate.v
  stat"
verilator --cc --exe --build -j 2 -fno-gate -Wno-fatal -Wno-lint -Wno-style --x-assign fast --x-initial fast \
  -I"$rtl/include" --top-module mxu_equiv_tb \
  "$rtl/pkg/tpu_fp_pkg.sv" "$rtl/core/tpu_delay.sv" "$rtl/core/tpu_pe.sv" "$rtl/core/tpu_mxu.sv" mxu_gate.v \
  "$here/mxu_equiv_tb.sv" "$here/mxu_equiv_main.cpp" -o mxu_equiv > verilator.log 2>&1
./obj_dir/mxu_equiv
