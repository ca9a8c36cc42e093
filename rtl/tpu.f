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
core/tpu_ram_1r1w.sv   // FPGA builds (TPU_FPGA_RAM): one read + one write port, maps to block RAM
core/tpu_compute.sv
core/tpu_datapath.sv
// --- system: register block, command processor, DMA, top ---
core/tpu_fifo.sv
core/tpu_decode.sv
core/tpu_dma_burst_gen.sv
core/tpu_axi_ar_arb.sv
core/tpu_reg_block.sv
core/tpu_cmd_proc.sv
core/tpu_dma_load.sv
core/tpu_dma_store.sv
core/tpu_top.sv
