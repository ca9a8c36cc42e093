// Digilent Arty A7-35T (Xilinx XC7A35T) board top: tpu_top with a 4x4 array, 128 KiB of block
// RAM that plays the host memory, and the UART bridge (rtl/fpga/tpu_uart_bridge.sv: the same
// protocol and host backend as the iCEBreaker build) on the FT2232's UART. Pins and clock:
// constraints/arty_a7_35t.xdc.
//
//   uart_txd_in (A9)   -> tpu_uart_bridge --AXI4-Lite--> tpu_top registers
//   uart_rxd_out (D10) <-      | native word port
//                              v
//                   tpu_axi_sram (RAMB36) <--AXI4-- tpu_top DMA master (32-bit)
//
// Clock: the 100 MHz oscillator through an MMCME2_BASE to ClkHz = 50 MHz (VCO 1000 MHz), a
// conservative target because timing closure cannot be checked here (no Vivado). Reset: a
// power-on counter after MMCM lock and the red RESET button ck_rst (low when pressed).
// LD4 shows irq, LD5 is a heartbeat while out of reset.
// The FPGA flows define TPU_FPGA_RAM, so the device's UB/WB/ACC are one-read-one-write RAMs that
// map to block RAM; so does tpu_axi_sram's host memory (its SPRAM form is iCE40 only).
// Sizing for the XC7A35T (20800 LUT6, 90 DSP48E1, 50 RAMB36): N=8 with all eight requantize lanes
// synthesizes to 103 DSP48E1 (64 PEs + 8 activation lanes of 32x32 multiplies), more than the part
// has; with ActLanes = 2 (an ACTIVATE row takes 4 cycles, results identical) the activation unit
// needs 8. N=16 would need 256 DSP48E1 for the PEs alone. The 128 KiB host memory takes 32 of the
// 50 RAMB36.
// scripts/fpga/xilinx.sh arty synthesizes this top; place-and-route needs Vivado.
module tpu_arty_top #(
  parameter int unsigned ArrayN     = 8,
  parameter int unsigned UbDepth    = 2048,
  parameter int unsigned WbDepth    = 512,
  parameter int unsigned AccDepth   = 1024,
  parameter int unsigned QueueDepth = 4,
  parameter int unsigned ActLanes   = 2,
  parameter int unsigned ClkHz      = 50000000,
  parameter int unsigned Baud       = 115200,
  parameter int unsigned MemBytes   = 131072
) (
  input  logic clk100mhz_i,   // E3, 100 MHz oscillator
  input  logic ck_rst_ni,     // C2, RESET button, low when pressed
  input  logic uart_txd_in_i, // A9, FT2232 TXD -> FPGA
  output logic uart_rxd_out_o,// D10, FPGA -> FT2232 RXD
  output logic led4_o,        // H5, LD4: irq
  output logic led5_o         // J5, LD5: heartbeat
);

  logic clk, locked;

`ifdef SYNTHESIS
  // 100 MHz -> VCO 1000 MHz -> ClkHz on CLKOUT1 (integer divider; 1000 MHz / ClkHz must be a
  // whole number from 1 to 128).
  localparam int unsigned MmcmDiv = 1000000000 / ClkHz;
  logic clk_mmcm, clk_fb;
  MMCME2_BASE #(
    .CLKIN1_PERIOD   (10.0),
    .CLKFBOUT_MULT_F (10.0),
    .DIVCLK_DIVIDE   (1),
    .CLKOUT1_DIVIDE  (MmcmDiv)
  ) u_mmcm (
    .CLKIN1(clk100mhz_i), .CLKFBIN(clk_fb), .CLKFBOUT(clk_fb), .CLKOUT1(clk_mmcm),
    .LOCKED(locked), .RST(1'b0), .PWRDWN(1'b0),
    .CLKFBOUTB(), .CLKOUT0(), .CLKOUT0B(), .CLKOUT1B(), .CLKOUT2(), .CLKOUT2B(), .CLKOUT3(),
    .CLKOUT3B(), .CLKOUT4(), .CLKOUT5(), .CLKOUT6()
  );
  BUFG u_bufg (.I(clk_mmcm), .O(clk));
`else
  // Simulation and lint: the board clock as is.
  assign clk    = clk100mhz_i;
  assign locked = 1'b1;
`endif

  logic irq, heartbeat;

  tpu_fpga_system #(
    .ArrayN(ArrayN), .UbDepth(UbDepth), .WbDepth(WbDepth), .AccDepth(AccDepth),
    .QueueDepth(QueueDepth), .ActLanes(ActLanes), .ClkHz(ClkHz), .Baud(Baud),
    .MemBytes(MemBytes)
  ) u_system (
    .clk_i(clk), .locked_i(locked), .btn_ni(ck_rst_ni), .rx_i(uart_txd_in_i), .tx_o(uart_rxd_out_o),
    .irq_o(irq), .heartbeat_o(heartbeat)
  );

  assign led4_o = irq;
  assign led5_o = heartbeat;

endmodule
