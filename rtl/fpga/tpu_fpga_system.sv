// What every FPGA board build shares: the device, a local memory that plays the host memory, and
// the UART bridge that lets a PC reach both; plus the board reset and a heartbeat. The board tops
// (tpu_icebreaker_top, tpu_arty_top, tpu_ulx3s_top) add only their clocking, pins and LED polarity.
//
//   rx_i / tx_o <-> tpu_uart_bridge --AXI4-Lite--> tpu_top registers
//                        | native word port
//                        v
//               tpu_axi_sram (host memory) <--AXI4-- tpu_top DMA master (32-bit)
//
// Reset: held for 15 cycles after configuration and clock lock (flops power up as 0 on the iCE40
// and are initialised on the others), and while the button is pressed (2-flop synchronizer).
module tpu_fpga_system #(
  parameter int unsigned ArrayN     = 4,
  parameter int unsigned UbDepth    = 256,
  parameter int unsigned WbDepth    = 64,
  parameter int unsigned AccDepth   = 128,
  parameter int unsigned QueueDepth = 2,
  // tpu_top's area knobs (see there); the defaults are the simulated device's
  parameter int unsigned ActLanes      = ArrayN,
  parameter int unsigned PerfCntW      = 64,
  parameter int unsigned FetchDepth    = 16,
  parameter int unsigned InflightDepth = 8,
  // No bf16 MXU mode on the boards (an fp32 adder per PE does not fit them): FEATURES.BF16 = 0.
  parameter bit          EnableBf16    = 1'b0,
  // ACTIVATE's 256-entry lookup table: FEATURES.LUT. Off on the boards: Yosys 0.23 maps the
  // table register (2048 flip-flops) and its byte lookups to ~32k LUT4 on ECP5 at N = 8 (the
  // variable part-selects become wide shifters), more than the ULX3S/Arty budgets leave.
  parameter bit          EnableLut     = 1'b0,
  parameter int unsigned ClkHz      = 12000000,
  parameter int unsigned Baud       = 115200,
  parameter int unsigned MemBytes   = 131072
) (
  input  logic clk_i,
  input  logic locked_i,     // clock stable (PLL/MMCM lock; tie to 1 without one)
  input  logic btn_ni,       // reset button, low when pressed
  input  logic rx_i,         // UART from the PC
  output logic tx_o,         // UART to the PC
  output logic irq_o,        // the device's interrupt line
  output logic heartbeat_o   // blinks at about 1 Hz while out of reset
);

  localparam int unsigned DmaDataW = 32;  // tpu_axi_sram is a 32-bit slave
  localparam int unsigned AxiIdW   = 1;
  localparam int unsigned Div      = (ClkHz + Baud / 2) / Baud;

  // ---------------------------------------------------------------------------------------------
  // Reset
  // ---------------------------------------------------------------------------------------------
  logic [3:0] por_q = 4'd0;
  logic [1:0] btn_q = 2'b00;
  logic       rst_n_q = 1'b0;

  always_ff @(posedge clk_i) begin
    btn_q <= {btn_q[0], btn_ni};
    if (!locked_i)          por_q <= 4'd0;
    else if (por_q != 4'hF) por_q <= por_q + 4'd1;
    rst_n_q <= (por_q == 4'hF) && btn_q[1];
  end

  logic rst_n;
  assign rst_n = rst_n_q;

  // ---------------------------------------------------------------------------------------------
  // Device
  // ---------------------------------------------------------------------------------------------
  logic [AxiIdW-1:0]     awid, bid, arid, rid;
  logic [31:0]           awaddr, araddr;
  logic [7:0]            awlen, arlen;
  logic [2:0]            awsize, arsize;
  logic [1:0]            awburst, arburst, bresp, rresp;
  logic                  awvalid, awready, wlast, wvalid, wready, bvalid, bready;
  logic                  arvalid, arready, rlast, rvalid, rready;
  logic [DmaDataW-1:0]   wdata, rdata;
  logic [DmaDataW/8-1:0] wstrb;

  logic [11:0] l_awaddr, l_araddr;
  logic        l_awvalid, l_awready, l_wvalid, l_wready, l_bvalid, l_bready;
  logic        l_arvalid, l_arready, l_rvalid, l_rready;
  logic [31:0] l_wdata, l_rdata;
  logic [3:0]  l_wstrb;
  logic [1:0]  l_bresp, l_rresp;

  tpu_top #(
    .ArrayN(ArrayN), .UbDepth(UbDepth), .WbDepth(WbDepth), .AccDepth(AccDepth),
    .DmaDataW(DmaDataW), .QueueDepth(QueueDepth), .AxiIdW(AxiIdW), .ActLanes(ActLanes),
    .PerfCntW(PerfCntW), .FetchDepth(FetchDepth), .InflightDepth(InflightDepth),
    .EnableBf16(EnableBf16), .EnableLut(EnableLut)
  ) u_tpu (
    .clk_i, .rst_ni(rst_n),
    .m_axi_awid_o(awid), .m_axi_awaddr_o(awaddr), .m_axi_awlen_o(awlen),
    .m_axi_awsize_o(awsize), .m_axi_awburst_o(awburst), .m_axi_awvalid_o(awvalid),
    .m_axi_awready_i(awready),
    .m_axi_wdata_o(wdata), .m_axi_wstrb_o(wstrb), .m_axi_wlast_o(wlast),
    .m_axi_wvalid_o(wvalid), .m_axi_wready_i(wready),
    .m_axi_bid_i(bid), .m_axi_bresp_i(bresp), .m_axi_bvalid_i(bvalid), .m_axi_bready_o(bready),
    .m_axi_arid_o(arid), .m_axi_araddr_o(araddr), .m_axi_arlen_o(arlen),
    .m_axi_arsize_o(arsize), .m_axi_arburst_o(arburst), .m_axi_arvalid_o(arvalid),
    .m_axi_arready_i(arready),
    .m_axi_rid_i(rid), .m_axi_rdata_i(rdata), .m_axi_rresp_i(rresp), .m_axi_rlast_i(rlast),
    .m_axi_rvalid_i(rvalid), .m_axi_rready_o(rready),
    .s_axil_awaddr_i(l_awaddr), .s_axil_awvalid_i(l_awvalid), .s_axil_awready_o(l_awready),
    .s_axil_wdata_i(l_wdata), .s_axil_wstrb_i(l_wstrb), .s_axil_wvalid_i(l_wvalid),
    .s_axil_wready_o(l_wready),
    .s_axil_bresp_o(l_bresp), .s_axil_bvalid_o(l_bvalid), .s_axil_bready_i(l_bready),
    .s_axil_araddr_i(l_araddr), .s_axil_arvalid_i(l_arvalid), .s_axil_arready_o(l_arready),
    .s_axil_rdata_o(l_rdata), .s_axil_rresp_o(l_rresp), .s_axil_rvalid_o(l_rvalid),
    .s_axil_rready_i(l_rready),
    .irq_o
  );

  // ---------------------------------------------------------------------------------------------
  // Host memory stand-in and UART bridge
  // ---------------------------------------------------------------------------------------------
  logic        p_req, p_we, p_gnt, p_rvalid;
  logic [31:0] p_addr, p_wdata, p_rdata;
  logic [15:0] div;

  tpu_axi_sram #(.MemBytes(MemBytes), .AxiIdW(AxiIdW)) u_sram (
    .clk_i, .rst_ni(rst_n),
    .s_axi_awid_i(awid), .s_axi_awaddr_i(awaddr), .s_axi_awlen_i(awlen),
    .s_axi_awsize_i(awsize), .s_axi_awburst_i(awburst), .s_axi_awvalid_i(awvalid),
    .s_axi_awready_o(awready),
    .s_axi_wdata_i(wdata), .s_axi_wstrb_i(wstrb), .s_axi_wlast_i(wlast),
    .s_axi_wvalid_i(wvalid), .s_axi_wready_o(wready),
    .s_axi_bid_o(bid), .s_axi_bresp_o(bresp), .s_axi_bvalid_o(bvalid), .s_axi_bready_i(bready),
    .s_axi_arid_i(arid), .s_axi_araddr_i(araddr), .s_axi_arlen_i(arlen),
    .s_axi_arsize_i(arsize), .s_axi_arburst_i(arburst), .s_axi_arvalid_i(arvalid),
    .s_axi_arready_o(arready),
    .s_axi_rid_o(rid), .s_axi_rdata_o(rdata), .s_axi_rresp_o(rresp), .s_axi_rlast_o(rlast),
    .s_axi_rvalid_o(rvalid), .s_axi_rready_i(rready),
    .p_req_i(p_req), .p_we_i(p_we), .p_addr_i(p_addr), .p_wdata_i(p_wdata),
    .p_gnt_o(p_gnt), .p_rvalid_o(p_rvalid), .p_rdata_o(p_rdata)
  );

  tpu_uart_bridge #(.MemBytes(MemBytes), .ClkHz(ClkHz), .DefaultDiv(Div)) u_bridge (
    .clk_i, .rst_ni(rst_n),
    .rx_i, .tx_o, .irq_i(irq_o),
    .m_axil_awaddr_o(l_awaddr), .m_axil_awvalid_o(l_awvalid), .m_axil_awready_i(l_awready),
    .m_axil_wdata_o(l_wdata), .m_axil_wstrb_o(l_wstrb), .m_axil_wvalid_o(l_wvalid),
    .m_axil_wready_i(l_wready),
    .m_axil_bresp_i(l_bresp), .m_axil_bvalid_i(l_bvalid), .m_axil_bready_o(l_bready),
    .m_axil_araddr_o(l_araddr), .m_axil_arvalid_o(l_arvalid), .m_axil_arready_i(l_arready),
    .m_axil_rdata_i(l_rdata), .m_axil_rresp_i(l_rresp), .m_axil_rvalid_i(l_rvalid),
    .m_axil_rready_o(l_rready),
    .mem_req_o(p_req), .mem_we_o(p_we), .mem_addr_o(p_addr), .mem_wdata_o(p_wdata),
    .mem_gnt_i(p_gnt), .mem_rvalid_i(p_rvalid), .mem_rdata_i(p_rdata),
    .div_o(div)
  );

  logic unused_div;
  assign unused_div = ^div;

  // ---------------------------------------------------------------------------------------------
  // Heartbeat: bit HbBit of a free-running counter (about 0.7-1.5 Hz at ClkHz)
  // ---------------------------------------------------------------------------------------------
  localparam int unsigned HbBit = $clog2(ClkHz) - 1;
  logic [HbBit:0] beat_q;
  always_ff @(posedge clk_i) begin
    if (!rst_n) beat_q <= '0;
    else        beat_q <= beat_q + 1'b1;
  end
  assign heartbeat_o = beat_q[HbBit] && rst_n;

endmodule
