// iCEBreaker (iCE40 UP5K) board top: a small tpu_top, 128 KiB of SPRAM that plays the host memory,
// and the UART bridge that lets a PC reach both over the FTDI's second channel.
//
//   UART RX/TX (pins 6/9) <-> tpu_uart_bridge --AXI4-Lite--> tpu_top registers
//                                  | native word port
//                                  v
//                     tpu_axi_sram (SPRAM) <--AXI4-- tpu_top DMA master
//
// One 12 MHz clock straight from the oscillator (no PLL: the UART divisor and the device both run
// at 12 MHz). Reset: a power-on counter and the user button BTN_N (active low). LEDR_N shows irq,
// LEDG_N blinks (about 0.7 Hz) while the clock runs and goes dark while the button holds reset.
module tpu_icebreaker_top #(
  parameter int unsigned ArrayN     = 4,
  parameter int unsigned UbDepth    = 256,
  parameter int unsigned WbDepth    = 64,
  parameter int unsigned AccDepth   = 128,
  parameter int unsigned QueueDepth = 2,
  // The smallest settings of tpu_top's area knobs: same results, more cycles (one requantize
  // lane: an ACTIVATE row takes ArrayN cycles) and less overlap.
  parameter int unsigned ActLanes      = 1,
  parameter int unsigned PerfCntW      = 32,
  parameter int unsigned FetchDepth    = 2,
  parameter int unsigned InflightDepth = 2,
  parameter bit          EnableBf16    = 1'b0,  // int8-only array (no fp logic)
  parameter bit          EnableLut     = 1'b0,  // no ACTIVATE lookup table (FEATURES.LUT = 0)
  parameter int unsigned ClkHz      = 12000000,
  parameter int unsigned Baud       = 115200,
  parameter int unsigned MemBytes   = 131072
) (
  input  logic clk_i,       // CLK, pin 35 (12 MHz)
  input  logic btn_ni,      // BTN_N, pin 10 (user button, low when pressed)
  input  logic rx_i,        // RX, pin 6 (FTDI channel B TXD -> FPGA)
  output logic tx_o,        // TX, pin 9 (FPGA -> FTDI channel B RXD)
  output logic led_r_no,    // LEDR_N, pin 11: irq
  output logic led_g_no     // LEDG_N, pin 37: heartbeat
);

  logic irq, heartbeat;

  tpu_fpga_system #(
    .ArrayN(ArrayN), .UbDepth(UbDepth), .WbDepth(WbDepth), .AccDepth(AccDepth),
    .QueueDepth(QueueDepth), .ActLanes(ActLanes), .PerfCntW(PerfCntW),
    .FetchDepth(FetchDepth), .InflightDepth(InflightDepth), .EnableBf16(EnableBf16), .EnableLut(EnableLut),
    .ClkHz(ClkHz), .Baud(Baud), .MemBytes(MemBytes)
  ) u_system (
    .clk_i(clk_i), .locked_i(1'b1), .btn_ni(btn_ni), .rx_i(rx_i), .tx_o(tx_o),
    .irq_o(irq), .heartbeat_o(heartbeat)
  );

  // LEDs are active low on the board.
  assign led_r_no = !irq;
  assign led_g_no = !heartbeat;

endmodule
