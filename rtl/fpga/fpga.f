// Ordered file list of the FPGA board tops, relative to rtl/. Use it after rtl/tpu.f (the device):
//   verilator ... -f rtl/tpu.f -f rtl/fpga/fpga.f   (paths resolved by the reader, see sim/board)
// Same format as rtl/tpu.f: one path per line, `//` comments.
// --- iCEBreaker: UART host link, SPRAM host memory, board top ---
fpga/tpu_uart_rx.sv
fpga/tpu_uart_tx.sv
fpga/tpu_uart_bridge.sv
fpga/tpu_axi_sram.sv
fpga/tpu_fpga_system.sv
fpga/tpu_icebreaker_top.sv
