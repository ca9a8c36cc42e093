// Ordered file list of the device, packages first. Paths are relative to rtl/.
// It feeds Verilator (sim/CMakeLists.txt, scripts/lint.sh) and Yosys (scripts/synth_yosys.sh) alike:
// keep it to one path per line, `//` comments and +incdir+ lines.
+incdir+include
pkg/tpu_isa_pkg.sv
pkg/tpu_reg_pkg.sv
// --- datapath: MXU, memories, activation unit, compute engine ---
core/tpu_delay.sv
core/tpu_pe.sv
core/tpu_mxu.sv
core/tpu_act_unit.sv
core/tpu_ram_2r2w.sv
core/tpu_compute.sv
core/tpu_datapath.sv
// --- system: register block, command processor, DMA, top ---
// (system files go here)
