// ULX3S (Lattice ECP5 LFE5U-85F) board top: tpu_top with an 8x8 array, 128 KiB of block RAM that
// plays the host memory, and the UART bridge (rtl/fpga/tpu_uart_bridge.sv: the same protocol and
// host backend as the iCEBreaker build) on the FT231X's UART. Pins: constraints/ulx3s.lpf.
//
//   ftdi_txd (M1) -> tpu_uart_bridge --AXI4-Lite--> tpu_top registers
//   ftdi_rxd (L4) <-      | native word port
//                         v
//              tpu_axi_sram (EBR) <--AXI4-- tpu_top DMA master (32-bit)
//
// Sizing for the LFE5U-85F (84k LUT4, 156 MULT18X18D, 208 DP16KD): N=16 needs about 330
// multipliers (256 PEs + 16 activation lanes of 32x32) with DSPs, or about 119k LUT4 without;
// N=8 takes about 100 MULT18X18D.
// One 25 MHz clock straight from the oscillator (no PLL). Reset: a power-on counter and the PWR
// button btn[0] (low when pressed). led[0] shows irq, led[7] is a heartbeat while out of reset.
// The FPGA flows define TPU_FPGA_RAM, so the device's UB/WB/ACC are one-read-one-write RAMs that
// map to DP16KD block RAM; so does tpu_axi_sram's host memory (its SPRAM form is iCE40 only).
// Place-and-route needs nextpnr-ecp5 and ecppack (prjtrellis), which Debian 12 does not
// ship: scripts/fpga/ecp5.sh ulx3s synthesizes this top and reports its resources.
module tpu_ulx3s_top #(
  parameter int unsigned ArrayN     = 8,
  parameter int unsigned UbDepth    = 4096,
  parameter int unsigned WbDepth    = 1024,
  parameter int unsigned AccDepth   = 1024,
  parameter int unsigned QueueDepth = 8,
  parameter int unsigned ClkHz      = 25000000,
  parameter int unsigned Baud       = 115200,
  parameter int unsigned MemBytes   = 131072
) (
  input  logic       clk_25mhz_i,  // G2, 25 MHz oscillator
  input  logic       btn_pwr_ni,   // D6, btn[0] (PWR), low when pressed
  input  logic       ftdi_txd_i,   // M1, FT231X TXD -> FPGA
  output logic       ftdi_rxd_o,   // L4, FPGA -> FT231X RXD
  output logic [7:0] led_o         // B2 C2 C1 D2 D1 E2 E1 H3, active high
);

  logic irq, heartbeat;

  tpu_fpga_system #(
    .ArrayN(ArrayN), .UbDepth(UbDepth), .WbDepth(WbDepth), .AccDepth(AccDepth),
    .QueueDepth(QueueDepth), .ClkHz(ClkHz), .Baud(Baud), .MemBytes(MemBytes)
  ) u_system (
    .clk_i(clk_25mhz_i), .locked_i(1'b1), .btn_ni(btn_pwr_ni), .rx_i(ftdi_txd_i), .tx_o(ftdi_rxd_o),
    .irq_o(irq), .heartbeat_o(heartbeat)
  );

  assign led_o = {heartbeat, 6'b0, irq};

endmodule
