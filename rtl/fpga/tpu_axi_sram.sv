// Board memory that plays the host memory: 32-bit words, an AXI4 slave for the device's DMA
// master and a native word port for the UART bridge, sharing one single-ported RAM.
//
// Storage: with the macro TPU_ICE40_SPRAM (scripts/fpga/ice40.sh defines it) four iCE40 UP5K
// SB_SPRAM256KA (16K x 16 each; two side by side make a 32-bit bank, two banks = 128 KiB);
// otherwise a behavioural single-port array with byte enables and the same one-cycle read
// latency, which Yosys maps to the block RAM of the other families (DP16KD, RAMB36E1) and which
// simulation and lint use.
//
// AXI4 slave: INCR bursts of 32-bit beats (awsize/arsize 2), one transaction at a time (an AR or an
// AW+W burst + B), a read beat every other cycle, a write beat every cycle. A beat outside
// [0, MemBytes) is not performed and answers SLVERR (read data 0). IDs are echoed.
// Native port: p_req_i held until p_gnt_o (one word per grant); read data in the cycle after the
// grant with p_rvalid_o. Out-of-range native accesses are the bridge's to avoid (it checks).
// Arbitration between the two when both are idle: round robin.
`include "tpu_assert.svh"

module tpu_axi_sram #(
  parameter int unsigned MemBytes = 131072,
  parameter int unsigned AxiIdW   = 4,
  localparam int unsigned Words   = MemBytes / 4,
  localparam int unsigned Aw      = $clog2(Words)
) (
  input  logic              clk_i,
  input  logic              rst_ni,

  input  logic [AxiIdW-1:0] s_axi_awid_i,
  input  logic [31:0]       s_axi_awaddr_i,
  input  logic [7:0]        s_axi_awlen_i,
  input  logic [2:0]        s_axi_awsize_i,
  input  logic [1:0]        s_axi_awburst_i,
  input  logic              s_axi_awvalid_i,
  output logic              s_axi_awready_o,
  input  logic [31:0]       s_axi_wdata_i,
  input  logic [3:0]        s_axi_wstrb_i,
  input  logic              s_axi_wlast_i,
  input  logic              s_axi_wvalid_i,
  output logic              s_axi_wready_o,
  output logic [AxiIdW-1:0] s_axi_bid_o,
  output logic [1:0]        s_axi_bresp_o,
  output logic              s_axi_bvalid_o,
  input  logic              s_axi_bready_i,
  input  logic [AxiIdW-1:0] s_axi_arid_i,
  input  logic [31:0]       s_axi_araddr_i,
  input  logic [7:0]        s_axi_arlen_i,
  input  logic [2:0]        s_axi_arsize_i,
  input  logic [1:0]        s_axi_arburst_i,
  input  logic              s_axi_arvalid_i,
  output logic              s_axi_arready_o,
  output logic [AxiIdW-1:0] s_axi_rid_o,
  output logic [31:0]       s_axi_rdata_o,
  output logic [1:0]        s_axi_rresp_o,
  output logic              s_axi_rlast_o,
  output logic              s_axi_rvalid_o,
  input  logic              s_axi_rready_i,

  input  logic              p_req_i,
  input  logic              p_we_i,
  input  logic [31:0]       p_addr_i,
  input  logic [31:0]       p_wdata_i,
  output logic              p_gnt_o,
  output logic              p_rvalid_o,
  output logic [31:0]       p_rdata_o
);

  localparam logic [1:0] RespOkay   = 2'b00;
  localparam logic [1:0] RespSlvErr = 2'b10;

  // ---------------------------------------------------------------------------------------------
  // The RAM: one access per cycle, read data the next cycle.
  // ---------------------------------------------------------------------------------------------
  logic          ram_en, ram_we;
  logic [Aw-1:0] ram_addr;
  logic [31:0]   ram_wdata, ram_rdata;
  logic [3:0]    ram_be;

`ifdef TPU_ICE40_SPRAM
  // iCE40 UP5K: 128 KiB = 2 banks x (2 x SB_SPRAM256KA of 16K x 16).
  `TPU_ASSERT_INIT(SpramSize_A, MemBytes == 131072)
  logic        bank_q;
  logic [63:0] dout;
  always_ff @(posedge clk_i) if (ram_en && !ram_we) bank_q <= ram_addr[Aw-1];
  for (genvar g = 0; g < 4; g++) begin : g_spram
    localparam int unsigned Bank = g / 2;
    localparam int unsigned Half = g % 2;
    SB_SPRAM256KA u_spram (
      .ADDRESS   (ram_addr[13:0]),
      .DATAIN    (ram_wdata[16*Half +: 16]),
      .MASKWREN  ({ram_be[2*Half+1], ram_be[2*Half+1], ram_be[2*Half], ram_be[2*Half]}),
      .WREN      (ram_we),
      .CHIPSELECT(ram_en && (ram_addr[Aw-1] == Bank[0])),
      .CLOCK     (clk_i),
      .STANDBY   (1'b0),
      .SLEEP     (1'b0),
      .POWEROFF  (1'b1),
      .DATAOUT   (dout[16*g +: 16])
    );
  end
  assign ram_rdata = bank_q ? dout[63:32] : dout[31:0];
`else
  logic [31:0] mem_q [Words];
  logic [31:0] rdata_q;
  always_ff @(posedge clk_i) begin
    if (ram_en) begin
      if (ram_we) begin
        for (int b = 0; b < 4; b++) begin
          if (ram_be[b]) mem_q[ram_addr][8*b +: 8] <= ram_wdata[8*b +: 8];
        end
      end else begin
        rdata_q <= mem_q[ram_addr];
      end
    end
  end
  assign ram_rdata = rdata_q;
`endif

  // ---------------------------------------------------------------------------------------------
  // Arbiter and AXI4 slave
  // ---------------------------------------------------------------------------------------------
  typedef enum logic [1:0] {StIdle, StRead, StWrite, StResp} state_e;

  state_e            state_q, state_d;
  logic [AxiIdW-1:0] id_q, id_d;
  logic [29:0]       waddr_q, waddr_d;        // word address of the next beat
  logic [7:0]        left_q, left_d;          // beats left to issue (read) / accept (write), minus 1
  logic              issued_all_q, issued_all_d;
  logic              pend_q, pend_d, pend_err_q, pend_err_d, pend_last_q, pend_last_d;
  logic              rvalid_q, rvalid_d, rlast_q, rlast_d;
  logic [31:0]       rdata_q2, rdata_d2;
  logic [1:0]        rresp_q, rresp_d, bresp_q, bresp_d;
  logic              prio_q, prio_d;          // 1: the native port goes first
  logic              p_rvalid_q;

  logic              in_range;
  assign in_range = (waddr_q < 30'(Words));

  always_comb begin
    state_d      = state_q;
    id_d         = id_q;
    waddr_d      = waddr_q;
    left_d       = left_q;
    issued_all_d = issued_all_q;
    pend_d       = 1'b0;
    pend_err_d   = pend_err_q;
    pend_last_d  = pend_last_q;
    rvalid_d     = rvalid_q;
    rlast_d      = rlast_q;
    rdata_d2     = rdata_q2;
    rresp_d      = rresp_q;
    bresp_d      = bresp_q;
    prio_d       = prio_q;

    ram_en    = 1'b0;
    ram_we    = 1'b0;
    ram_addr  = waddr_q[Aw-1:0];
    ram_wdata = s_axi_wdata_i;
    ram_be    = s_axi_wstrb_i;

    s_axi_arready_o = 1'b0;
    s_axi_awready_o = 1'b0;
    s_axi_wready_o  = 1'b0;
    p_gnt_o         = 1'b0;

    unique case (state_q)
      StIdle: begin
        if (p_req_i && (prio_q || !(s_axi_arvalid_i || s_axi_awvalid_i))) begin
          p_gnt_o   = 1'b1;
          ram_en    = 1'b1;
          ram_we    = p_we_i;
          ram_addr  = p_addr_i[Aw+1:2];
          ram_wdata = p_wdata_i;
          ram_be    = 4'hF;
          prio_d    = 1'b0;
        end else if (s_axi_arvalid_i) begin
          s_axi_arready_o = 1'b1;
          id_d         = s_axi_arid_i;
          waddr_d      = s_axi_araddr_i[31:2];
          left_d       = s_axi_arlen_i;
          issued_all_d = 1'b0;
          state_d      = StRead;
          prio_d       = 1'b1;
        end else if (s_axi_awvalid_i) begin
          s_axi_awready_o = 1'b1;
          id_d    = s_axi_awid_i;
          waddr_d = s_axi_awaddr_i[31:2];
          bresp_d = RespOkay;
          state_d = StWrite;
          prio_d  = 1'b1;
        end
      end
      StRead: begin
        // Output register: take the RAM word issued last cycle.
        if (rvalid_q && s_axi_rready_i) begin
          rvalid_d = 1'b0;
          if (rlast_q) state_d = StIdle;
        end
        if (pend_q) begin
          rvalid_d = 1'b1;
          rlast_d  = pend_last_q;
          rdata_d2 = pend_err_q ? 32'd0 : ram_rdata;
          rresp_d  = pend_err_q ? RespSlvErr : RespOkay;
        end
        // Issue the next beat when its result has a free output register the next cycle.
        if (!issued_all_q && !pend_q && (!rvalid_q || s_axi_rready_i)) begin
          ram_en      = in_range;
          pend_d      = 1'b1;
          pend_err_d  = !in_range;
          pend_last_d = (left_q == 8'd0);
          waddr_d     = waddr_q + 30'd1;
          left_d      = left_q - 8'd1;
          if (left_q == 8'd0) issued_all_d = 1'b1;
        end
      end
      StWrite: begin
        s_axi_wready_o = 1'b1;
        if (s_axi_wvalid_i) begin
          ram_en  = in_range;
          ram_we  = 1'b1;
          waddr_d = waddr_q + 30'd1;
          if (!in_range) bresp_d = RespSlvErr;
          if (s_axi_wlast_i) state_d = StResp;
        end
      end
      StResp: begin
        if (s_axi_bready_i) state_d = StIdle;
      end
      default: state_d = StIdle;
    endcase
  end

  always_ff @(posedge clk_i) begin
    if (!rst_ni) begin
      state_q      <= StIdle;
      id_q         <= '0;
      waddr_q      <= '0;
      left_q       <= '0;
      issued_all_q <= 1'b0;
      pend_q       <= 1'b0;
      pend_err_q   <= 1'b0;
      pend_last_q  <= 1'b0;
      rvalid_q     <= 1'b0;
      rlast_q      <= 1'b0;
      rdata_q2     <= '0;
      rresp_q      <= RespOkay;
      bresp_q      <= RespOkay;
      prio_q       <= 1'b0;
      p_rvalid_q   <= 1'b0;
    end else begin
      state_q      <= state_d;
      id_q         <= id_d;
      waddr_q      <= waddr_d;
      left_q       <= left_d;
      issued_all_q <= issued_all_d;
      pend_q       <= pend_d;
      pend_err_q   <= pend_err_d;
      pend_last_q  <= pend_last_d;
      rvalid_q     <= rvalid_d;
      rlast_q      <= rlast_d;
      rdata_q2     <= rdata_d2;
      rresp_q      <= rresp_d;
      bresp_q      <= bresp_d;
      prio_q       <= prio_d;
      p_rvalid_q   <= p_gnt_o && !p_we_i;
    end
  end

  assign s_axi_rid_o    = id_q;
  assign s_axi_rdata_o  = rdata_q2;
  assign s_axi_rresp_o  = rresp_q;
  assign s_axi_rlast_o  = rlast_q;
  assign s_axi_rvalid_o = rvalid_q;
  assign s_axi_bid_o    = id_q;
  assign s_axi_bresp_o  = bresp_q;
  assign s_axi_bvalid_o = (state_q == StResp);
  assign p_rvalid_o     = p_rvalid_q;
  assign p_rdata_o      = ram_rdata;

  logic unused_sram;
  assign unused_sram = ^{s_axi_awaddr_i[1:0], s_axi_awlen_i, s_axi_araddr_i[1:0], s_axi_awsize_i, s_axi_awburst_i, s_axi_arsize_i, s_axi_arburst_i,
                         p_addr_i[31:Aw+2], p_addr_i[1:0]};

  `TPU_ASSERT(AxiSize_A, !(s_axi_arvalid_i && s_axi_arsize_i != 3'd2) &&
                         !(s_axi_awvalid_i && s_axi_awsize_i != 3'd2), clk_i, !rst_ni)
  `TPU_ASSERT(NativeRange_A, !p_req_i || p_addr_i < MemBytes, clk_i, !rst_ni)

endmodule
