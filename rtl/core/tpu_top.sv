// Device top: register block + command processor + LOAD/STORE DMA engines + datapath, behind an
// AXI4 master (DMA and instruction fetch) and an AXI4-Lite slave (registers).
//
// AXI IDs: fetch ARID 0, LOAD ARID 1, STORE AWID 0, FENCE AWID 1. R is routed by RID, B by BID.
// Every master port keeps valid and payload stable until ready. rready and bready are always 1:
// each reader reserves buffer space before it issues a burst.
//
// Soft reset: CTRL.SOFT_RESET stops new work (stop); when no AXI transaction is outstanding or
// offered (bus monitor below), the register block pulses soft_rst for one cycle, which resets
// everything here except the register block's DMA window and IRQ enable.
`include "tpu_assert.svh"

module tpu_top #(
  parameter int unsigned ArrayN     = 16,
  parameter int unsigned UbDepth    = 32768,
  parameter int unsigned WbDepth    = 4096,
  parameter int unsigned AccDepth   = 4096,
  parameter int unsigned DmaDataW   = 128,
  parameter int unsigned QueueDepth = 8,
  parameter int unsigned AxiIdW     = 4,
  // Area knobs for small FPGAs (docs/fpga.md). The defaults are the simulated device; each
  // smaller setting keeps every result and fault bit-identical and costs only cycles (or, for
  // PerfCntW, counter range).
  parameter int unsigned ActLanes      = ArrayN, // requantize lanes: a row takes ArrayN/ActLanes cycles
  parameter int unsigned PerfCntW      = 64,     // performance counter width, 32 or 64
  parameter int unsigned FetchDepth    = 16,     // instruction prefetch buffer, instructions
  parameter int unsigned InflightDepth = 8,      // issued-not-done instructions per engine
  // bf16 MXU mode, fp32 ACTIVATE, FEATURES.BF16 (0: the int8-only device, for small FPGAs: no fp
  // logic, single-bank UB/WB; the decoder faults the bf16 mode bits)
  parameter bit          EnableBf16    = 1'b1,
  // ACTIVATE `lut`, FEATURES.LUT (0: no 256-entry table; the decoder faults the `lut` bit)
  parameter bit          EnableLut     = 1'b1
) (
  input  logic                  clk_i,
  input  logic                  rst_ni,

  // AXI4 master
  output logic [AxiIdW-1:0]     m_axi_awid_o,
  output logic [31:0]           m_axi_awaddr_o,
  output logic [7:0]            m_axi_awlen_o,
  output logic [2:0]            m_axi_awsize_o,
  output logic [1:0]            m_axi_awburst_o,
  output logic                  m_axi_awvalid_o,
  input  logic                  m_axi_awready_i,
  output logic [DmaDataW-1:0]   m_axi_wdata_o,
  output logic [DmaDataW/8-1:0] m_axi_wstrb_o,
  output logic                  m_axi_wlast_o,
  output logic                  m_axi_wvalid_o,
  input  logic                  m_axi_wready_i,
  input  logic [AxiIdW-1:0]     m_axi_bid_i,
  input  logic [1:0]            m_axi_bresp_i,
  input  logic                  m_axi_bvalid_i,
  output logic                  m_axi_bready_o,
  output logic [AxiIdW-1:0]     m_axi_arid_o,
  output logic [31:0]           m_axi_araddr_o,
  output logic [7:0]            m_axi_arlen_o,
  output logic [2:0]            m_axi_arsize_o,
  output logic [1:0]            m_axi_arburst_o,
  output logic                  m_axi_arvalid_o,
  input  logic                  m_axi_arready_i,
  input  logic [AxiIdW-1:0]     m_axi_rid_i,
  input  logic [DmaDataW-1:0]   m_axi_rdata_i,
  input  logic [1:0]            m_axi_rresp_i,
  input  logic                  m_axi_rlast_i,
  input  logic                  m_axi_rvalid_i,
  output logic                  m_axi_rready_o,

  // AXI4-Lite slave
  input  logic [11:0]           s_axil_awaddr_i,
  input  logic                  s_axil_awvalid_i,
  output logic                  s_axil_awready_o,
  input  logic [31:0]           s_axil_wdata_i,
  input  logic [3:0]            s_axil_wstrb_i,
  input  logic                  s_axil_wvalid_i,
  output logic                  s_axil_wready_o,
  output logic [1:0]            s_axil_bresp_o,
  output logic                  s_axil_bvalid_o,
  input  logic                  s_axil_bready_i,
  input  logic [11:0]           s_axil_araddr_i,
  input  logic                  s_axil_arvalid_i,
  output logic                  s_axil_arready_o,
  output logic [31:0]           s_axil_rdata_o,
  output logic [1:0]            s_axil_rresp_o,
  output logic                  s_axil_rvalid_o,
  input  logic                  s_axil_rready_i,

  output logic                  irq_o
);

  localparam int unsigned BeatBytes = DmaDataW / 8;
  localparam logic [2:0]  AxSize    = 3'($clog2(BeatBytes));
  localparam logic [1:0]  BurstIncr = 2'b01;
  localparam logic [AxiIdW-1:0] IdFetch = AxiIdW'(0);
  localparam logic [AxiIdW-1:0] IdLoad  = AxiIdW'(1);
  localparam logic [AxiIdW-1:0] IdStore = AxiIdW'(0);
  localparam logic [AxiIdW-1:0] IdFence = AxiIdW'(1);

  // ---------------------------------------------------------------------------------------------
  // Resets
  // ---------------------------------------------------------------------------------------------
  logic soft_rst, stop;
  logic rst_int_n;
  assign rst_int_n = rst_ni && !soft_rst;

  // ---------------------------------------------------------------------------------------------
  // Register block
  // ---------------------------------------------------------------------------------------------
  logic [31:0] ring_base, ring_size, ring_tail, win_base, win_last;
  logic        doorbell;
  logic        cp_busy, cp_faulted, irq_fence_set, irq_fault_set;
  logic [31:0] ring_head, fence_value, fault_pc, fault_info;
  logic [3:0]  fault_cause;
  logic        axi_quiet;
  logic        perf_mxu_active, perf_weight_stall, perf_weight_shift, perf_act_busy;
  logic        perf_dma_wait;
  logic [2:0]  perf_instret_inc;
  logic [15:0] perf_rd_bytes_inc, perf_wr_bytes_inc;

  tpu_reg_block #(
    .ArrayN(ArrayN), .UbDepth(UbDepth), .WbDepth(WbDepth), .AccDepth(AccDepth),
    .DmaDataW(DmaDataW), .QueueDepth(QueueDepth), .PerfCntW(PerfCntW), .EnableBf16(EnableBf16),
    .EnableLut(EnableLut)
  ) u_reg_block (
    .clk_i, .rst_ni,
    .s_axil_awaddr_i, .s_axil_awvalid_i, .s_axil_awready_o,
    .s_axil_wdata_i, .s_axil_wstrb_i, .s_axil_wvalid_i, .s_axil_wready_o,
    .s_axil_bresp_o, .s_axil_bvalid_o, .s_axil_bready_i,
    .s_axil_araddr_i, .s_axil_arvalid_i, .s_axil_arready_o,
    .s_axil_rdata_o, .s_axil_rresp_o, .s_axil_rvalid_o, .s_axil_rready_i,
    .irq_o,
    .ring_base_o(ring_base), .ring_size_o(ring_size), .ring_tail_o(ring_tail),
    .doorbell_o(doorbell), .dma_win_base_o(win_base), .dma_win_last_o(win_last),
    .busy_i(cp_busy), .faulted_i(cp_faulted), .ring_head_i(ring_head),
    .fence_value_i(fence_value), .fault_cause_i(fault_cause), .fault_pc_i(fault_pc),
    .fault_info_i(fault_info), .irq_fence_set_i(irq_fence_set), .irq_fault_set_i(irq_fault_set),
    .axi_quiet_i(axi_quiet), .stop_o(stop), .soft_rst_o(soft_rst),
    .perf_busy_i(cp_busy), .perf_mxu_active_i(perf_mxu_active),
    .perf_weight_stall_i(perf_weight_stall), .perf_weight_shift_i(perf_weight_shift),
    .perf_dma_wait_i(perf_dma_wait), .perf_act_busy_i(perf_act_busy),
    .perf_instret_inc_i(perf_instret_inc), .perf_rd_bytes_inc_i(perf_rd_bytes_inc),
    .perf_wr_bytes_inc_i(perf_wr_bytes_inc)
  );

  // ---------------------------------------------------------------------------------------------
  // Command processor
  // ---------------------------------------------------------------------------------------------
  logic                f_arvalid, f_arready, f_rvalid, f_rready;
  logic [31:0]         f_araddr;
  logic [7:0]          f_arlen;
  logic                fw_awvalid, fw_awready, fw_wvalid, fw_wready, fw_bvalid, fw_bready;
  logic [31:0]         fw_awaddr;
  logic [DmaDataW-1:0] fw_wdata;
  logic [BeatBytes-1:0] fw_wstrb;

  logic         ld_valid, ld_ready, ld_done, ld_idle, ld_err;
  tpu_isa_pkg::load_t  ld_instr;
  logic [31:0]  ld_pc, ld_err_addr, ld_err_pc;
  logic         cmp_valid, cmp_ready, cmp_done, cmp_idle;
  tpu_isa_pkg::instr_t cmp_instr;
  logic         st_valid, st_ready, st_done, st_idle, st_err;
  tpu_isa_pkg::store_t st_instr;
  logic [31:0]  st_pc, st_err_addr, st_err_pc;

  tpu_cmd_proc #(
    .ArrayN(ArrayN), .UbDepth(UbDepth), .WbDepth(WbDepth), .AccDepth(AccDepth),
    .DmaDataW(DmaDataW), .QueueDepth(QueueDepth), .FetchDepth(FetchDepth),
    .InflightDepth(InflightDepth), .EnableBf16(EnableBf16), .EnableLut(EnableLut)
  ) u_cmd_proc (
    .clk_i, .rst_ni(rst_int_n), .stop_i(stop),
    .ring_base_i(ring_base), .ring_size_i(ring_size), .ring_tail_i(ring_tail),
    .doorbell_i(doorbell), .dma_win_base_i(win_base), .dma_win_last_i(win_last),
    .busy_o(cp_busy), .faulted_o(cp_faulted), .ring_head_o(ring_head),
    .fence_value_o(fence_value), .fault_cause_o(fault_cause), .fault_pc_o(fault_pc),
    .fault_info_o(fault_info), .irq_fence_set_o(irq_fence_set), .irq_fault_set_o(irq_fault_set),
    .perf_dma_wait_o(perf_dma_wait), .perf_instret_inc_o(perf_instret_inc),
    .f_arvalid_o(f_arvalid), .f_arready_i(f_arready), .f_araddr_o(f_araddr), .f_arlen_o(f_arlen),
    .f_rvalid_i(f_rvalid), .f_rready_o(f_rready), .f_rdata_i(m_axi_rdata_i),
    .f_rresp_i(m_axi_rresp_i), .f_rlast_i(m_axi_rlast_i),
    .fw_awvalid_o(fw_awvalid), .fw_awready_i(fw_awready), .fw_awaddr_o(fw_awaddr),
    .fw_wvalid_o(fw_wvalid), .fw_wready_i(fw_wready), .fw_wdata_o(fw_wdata),
    .fw_wstrb_o(fw_wstrb), .fw_bvalid_i(fw_bvalid), .fw_bready_o(fw_bready),
    .fw_bresp_i(m_axi_bresp_i),
    .ld_valid_o(ld_valid), .ld_ready_i(ld_ready), .ld_instr_o(ld_instr), .ld_pc_o(ld_pc),
    .ld_done_i(ld_done), .ld_idle_i(ld_idle), .ld_err_i(ld_err), .ld_err_addr_i(ld_err_addr),
    .ld_err_pc_i(ld_err_pc),
    .cmp_valid_o(cmp_valid), .cmp_ready_i(cmp_ready), .cmp_instr_o(cmp_instr),
    .cmp_done_i(cmp_done), .cmp_idle_i(cmp_idle),
    .st_valid_o(st_valid), .st_ready_i(st_ready), .st_instr_o(st_instr), .st_pc_o(st_pc),
    .st_done_i(st_done), .st_idle_i(st_idle), .st_err_i(st_err), .st_err_addr_i(st_err_addr),
    .st_err_pc_i(st_err_pc)
  );

  // ---------------------------------------------------------------------------------------------
  // DMA engines
  // ---------------------------------------------------------------------------------------------
  logic                  l_arvalid, l_arready, l_rvalid, l_rready;
  logic [31:0]           l_araddr;
  logic [7:0]            l_arlen;
  logic                  dma_wr_valid, dma_wr_ready;
  logic [1:0]            dma_wr_mem;
  logic [19:0]           dma_wr_addr;
  logic [32*ArrayN-1:0]  dma_wr_data;

  tpu_dma_load #(.ArrayN(ArrayN), .DmaDataW(DmaDataW)) u_dma_load (
    .clk_i, .rst_ni(rst_int_n), .stop_i(stop),
    .valid_i(ld_valid), .ready_o(ld_ready), .instr_i(ld_instr), .pc_i(ld_pc),
    .done_o(ld_done), .idle_o(ld_idle), .err_o(ld_err), .err_addr_o(ld_err_addr),
    .err_pc_o(ld_err_pc),
    .arvalid_o(l_arvalid), .arready_i(l_arready), .araddr_o(l_araddr), .arlen_o(l_arlen),
    .rvalid_i(l_rvalid), .rready_o(l_rready), .rdata_i(m_axi_rdata_i), .rresp_i(m_axi_rresp_i),
    .rlast_i(m_axi_rlast_i),
    .wr_valid_o(dma_wr_valid), .wr_ready_i(dma_wr_ready), .wr_mem_o(dma_wr_mem),
    .wr_addr_o(dma_wr_addr), .wr_data_o(dma_wr_data)
  );

  logic                  s_awvalid, s_awready, s_wvalid, s_wready, s_wlast, s_bvalid, s_bready;
  logic [31:0]           s_awaddr;
  logic [7:0]            s_awlen;
  logic [DmaDataW-1:0]   s_wdata;
  logic                  dma_rd_req_valid, dma_rd_req_ready, dma_rd_rsp_valid;
  logic [1:0]            dma_rd_mem;
  logic [19:0]           dma_rd_addr;
  logic [32*ArrayN-1:0]  dma_rd_rsp_data;

  tpu_dma_store #(.ArrayN(ArrayN), .DmaDataW(DmaDataW), .RowBufDepth(4)) u_dma_store (
    .clk_i, .rst_ni(rst_int_n), .stop_i(stop),
    .valid_i(st_valid), .ready_o(st_ready), .instr_i(st_instr), .pc_i(st_pc),
    .done_o(st_done), .idle_o(st_idle), .err_o(st_err), .err_addr_o(st_err_addr),
    .err_pc_o(st_err_pc),
    .awvalid_o(s_awvalid), .awready_i(s_awready), .awaddr_o(s_awaddr), .awlen_o(s_awlen),
    .wvalid_o(s_wvalid), .wready_i(s_wready), .wdata_o(s_wdata), .wlast_o(s_wlast),
    .bvalid_i(s_bvalid), .bready_o(s_bready), .bresp_i(m_axi_bresp_i),
    .rd_req_valid_o(dma_rd_req_valid), .rd_req_ready_i(dma_rd_req_ready),
    .rd_mem_o(dma_rd_mem), .rd_addr_o(dma_rd_addr),
    .rd_rsp_valid_i(dma_rd_rsp_valid), .rd_rsp_data_i(dma_rd_rsp_data)
  );

  // ---------------------------------------------------------------------------------------------
  // Datapath
  // ---------------------------------------------------------------------------------------------
  tpu_datapath #(
    .ArrayN(ArrayN), .UbDepth(UbDepth), .WbDepth(WbDepth), .AccDepth(AccDepth),
    .ActLanes(ActLanes), .EnableBf16(EnableBf16), .EnableLut(EnableLut)
  ) u_datapath (
    .clk_i, .rst_ni(rst_int_n),
    .cmp_valid_i(cmp_valid), .cmp_ready_o(cmp_ready), .cmp_instr_i(cmp_instr),
    .cmp_done_o(cmp_done), .cmp_idle_o(cmp_idle),
    .dma_wr_valid_i(dma_wr_valid), .dma_wr_ready_o(dma_wr_ready), .dma_wr_mem_i(dma_wr_mem),
    .dma_wr_addr_i(dma_wr_addr), .dma_wr_data_i(dma_wr_data),
    .dma_rd_req_valid_i(dma_rd_req_valid), .dma_rd_req_ready_o(dma_rd_req_ready),
    .dma_rd_mem_i(dma_rd_mem), .dma_rd_addr_i(dma_rd_addr),
    .dma_rd_rsp_valid_o(dma_rd_rsp_valid), .dma_rd_rsp_data_o(dma_rd_rsp_data),
    .perf_mxu_active_o(perf_mxu_active), .perf_weight_stall_o(perf_weight_stall),
    .perf_weight_shift_o(perf_weight_shift), .perf_act_busy_o(perf_act_busy)
  );

  // ---------------------------------------------------------------------------------------------
  // AXI read: AR arbitration (fetch / LOAD), R routing by RID
  // ---------------------------------------------------------------------------------------------
  // Round robin between fetch (0) and LOAD (1); the grant holds while AR waits for arready, so
  // AR stays stable on the bus.
  logic [1:0] ar_gnt;
  logic       ar_sel;
  tpu_rr_arb #(.N(2)) u_ar_arb (
    .clk_i, .rst_ni(rst_int_n),
    .req_i({l_arvalid, f_arvalid}), .ack_i(m_axi_arready_i),
    .valid_o(m_axi_arvalid_o), .gnt_o(ar_gnt), .idx_o(ar_sel)
  );
  assign m_axi_araddr_o  = ar_sel ? l_araddr : f_araddr;
  assign m_axi_arlen_o   = ar_sel ? l_arlen : f_arlen;
  assign f_arready       = ar_gnt[0] && m_axi_arready_i;
  assign l_arready       = ar_gnt[1] && m_axi_arready_i;
  assign m_axi_arid_o    = ar_sel ? IdLoad : IdFetch;
  assign m_axi_arsize_o  = AxSize;
  assign m_axi_arburst_o = BurstIncr;

  logic r_is_load;
  assign r_is_load      = (m_axi_rid_i == IdLoad);
  assign f_rvalid       = m_axi_rvalid_i && !r_is_load;
  assign l_rvalid       = m_axi_rvalid_i && r_is_load;
  assign m_axi_rready_o = r_is_load ? l_rready : f_rready;

  // ---------------------------------------------------------------------------------------------
  // AXI write: STORE or FENCE (never both: a FENCE waits until the STORE engine is idle)
  // ---------------------------------------------------------------------------------------------
  logic fence_aw, fence_w;
  assign fence_aw = fw_awvalid;
  assign fence_w  = fw_wvalid;

  assign m_axi_awvalid_o = s_awvalid || fw_awvalid;
  assign m_axi_awid_o    = fence_aw ? IdFence : IdStore;
  assign m_axi_awaddr_o  = fence_aw ? fw_awaddr : s_awaddr;
  assign m_axi_awlen_o   = fence_aw ? 8'd0 : s_awlen;
  assign m_axi_awsize_o  = AxSize;
  assign m_axi_awburst_o = BurstIncr;
  assign s_awready       = m_axi_awready_i && !fence_aw;
  assign fw_awready      = m_axi_awready_i && fence_aw;

  assign m_axi_wvalid_o = s_wvalid || fw_wvalid;
  assign m_axi_wdata_o  = fence_w ? fw_wdata : s_wdata;
  assign m_axi_wstrb_o  = fence_w ? fw_wstrb : {BeatBytes{1'b1}};
  assign m_axi_wlast_o  = fence_w ? 1'b1 : s_wlast;
  assign s_wready       = m_axi_wready_i && !fence_w;
  assign fw_wready      = m_axi_wready_i && fence_w;

  logic b_is_fence;
  assign b_is_fence     = (m_axi_bid_i == IdFence);
  assign fw_bvalid      = m_axi_bvalid_i && b_is_fence;
  assign s_bvalid       = m_axi_bvalid_i && !b_is_fence;
  assign m_axi_bready_o = b_is_fence ? fw_bready : s_bready;

  // ---------------------------------------------------------------------------------------------
  // Bus monitor: outstanding transactions (soft reset) and byte counters (perf)
  // ---------------------------------------------------------------------------------------------
  logic        ar_hs, r_last_hs, aw_hs, w_hs, b_hs;
  logic [15:0] rd_out_q, wr_out_q, w_pend_q;
  assign ar_hs     = m_axi_arvalid_o && m_axi_arready_i;
  assign r_last_hs = m_axi_rvalid_i && m_axi_rready_o && m_axi_rlast_i;
  assign aw_hs     = m_axi_awvalid_o && m_axi_awready_i;
  assign w_hs      = m_axi_wvalid_o && m_axi_wready_i;
  assign b_hs      = m_axi_bvalid_i && m_axi_bready_o;

  tpu_counter #(.Width(16)) u_rd_out (
    .clk_i, .rst_ni, .clr_i(1'b0), .incr_i(16'(ar_hs)), .decr_i(16'(r_last_hs)), .q_o(rd_out_q)
  );
  tpu_counter #(.Width(16)) u_wr_out (
    .clk_i, .rst_ni, .clr_i(1'b0), .incr_i(16'(aw_hs)), .decr_i(16'(b_hs)), .q_o(wr_out_q)
  );
  logic [15:0] aw_beats;
  assign aw_beats = aw_hs ? ({8'd0, m_axi_awlen_o} + 16'd1) : 16'd0;
  tpu_counter #(.Width(16)) u_w_pend (
    .clk_i, .rst_ni, .clr_i(1'b0), .incr_i(aw_beats), .decr_i(16'(w_hs)), .q_o(w_pend_q)
  );
  assign axi_quiet = !m_axi_arvalid_o && !m_axi_awvalid_o && !m_axi_wvalid_o &&
                     (rd_out_q == '0) && (wr_out_q == '0) && (w_pend_q == '0);

  logic [15:0] wstrb_bytes;
  always_comb begin
    wstrb_bytes = '0;
    for (int i = 0; i < BeatBytes; i++) wstrb_bytes = wstrb_bytes + {15'd0, m_axi_wstrb_o[i]};
  end
  assign perf_rd_bytes_inc = (m_axi_rvalid_i && m_axi_rready_o) ? 16'(BeatBytes) : 16'd0;
  assign perf_wr_bytes_inc = w_hs ? wstrb_bytes : 16'd0;

  logic unused_top;
  assign unused_top = ^{m_axi_bresp_i[0], s_bready, fw_bready, l_rready, f_rready};

  // ---------------------------------------------------------------------------------------------
  // Assertions (AXI master rules on all five channels)
  // ---------------------------------------------------------------------------------------------
  `TPU_ASSERT(AxiArStable_A, m_axi_arvalid_o && !m_axi_arready_i |=> m_axi_arvalid_o &&
              $stable(m_axi_araddr_o) && $stable(m_axi_arlen_o) && $stable(m_axi_arid_o),
              clk_i, !rst_ni)
  `TPU_ASSERT(AxiAwStable_A, m_axi_awvalid_o && !m_axi_awready_i |=> m_axi_awvalid_o &&
              $stable(m_axi_awaddr_o) && $stable(m_axi_awlen_o) && $stable(m_axi_awid_o),
              clk_i, !rst_ni)
  `TPU_ASSERT(AxiWStable_A, m_axi_wvalid_o && !m_axi_wready_i |=> m_axi_wvalid_o &&
              $stable(m_axi_wdata_o) && $stable(m_axi_wstrb_o) && $stable(m_axi_wlast_o),
              clk_i, !rst_ni)
  `TPU_ASSERT(AxiRReady_A, m_axi_rready_o, clk_i, !rst_ni)
  `TPU_ASSERT(AxiBReady_A, m_axi_bready_o, clk_i, !rst_ni)
  `TPU_ASSERT_NEVER(WriteMastersOverlap_A, (s_awvalid || s_wvalid) && (fw_awvalid || fw_wvalid),
                    clk_i, !rst_ni)
  `TPU_ASSERT_NEVER(WBeforeAw_A, m_axi_wvalid_o && (w_pend_q == '0) && !aw_hs, clk_i, !rst_ni)
  `TPU_ASSERT_NEVER(RUnexpected_A, m_axi_rvalid_i && (rd_out_q == '0), clk_i, !rst_ni)
  `TPU_ASSERT_NEVER(BUnexpected_A, m_axi_bvalid_i && (wr_out_q == '0), clk_i, !rst_ni)
  `TPU_ASSERT_INIT(DataWidth_A, DmaDataW >= 32 && DmaDataW <= 128 &&
                   (DmaDataW & (DmaDataW - 1)) == 0)
  `TPU_ASSERT_INIT(IdWidth_A, AxiIdW >= 1)

  // Never X on what the device shows the outside world: every handshake and the interrupt at
  // every clock edge out of reset, every response while it is valid.
  `TPU_ASSERT_KNOWN(AxiAwValidKnown_A, m_axi_awvalid_o, clk_i, !rst_ni)
  `TPU_ASSERT_KNOWN(AxiWValidKnown_A, m_axi_wvalid_o, clk_i, !rst_ni)
  `TPU_ASSERT_KNOWN(AxiBReadyKnown_A, m_axi_bready_o, clk_i, !rst_ni)
  `TPU_ASSERT_KNOWN(AxiArValidKnown_A, m_axi_arvalid_o, clk_i, !rst_ni)
  `TPU_ASSERT_KNOWN(AxiRReadyKnown_A, m_axi_rready_o, clk_i, !rst_ni)
  `TPU_ASSERT_KNOWN(AxilAwReadyKnown_A, s_axil_awready_o, clk_i, !rst_ni)
  `TPU_ASSERT_KNOWN(AxilWReadyKnown_A, s_axil_wready_o, clk_i, !rst_ni)
  `TPU_ASSERT_KNOWN(AxilBValidKnown_A, s_axil_bvalid_o, clk_i, !rst_ni)
  `TPU_ASSERT_KNOWN(AxilArReadyKnown_A, s_axil_arready_o, clk_i, !rst_ni)
  `TPU_ASSERT_KNOWN(AxilRValidKnown_A, s_axil_rvalid_o, clk_i, !rst_ni)
  `TPU_ASSERT_KNOWN(IrqKnown_A, irq_o, clk_i, !rst_ni)
  `TPU_ASSERT(AxilBRespKnown_A, s_axil_bvalid_o |-> !$isunknown(s_axil_bresp_o), clk_i, !rst_ni)
  `TPU_ASSERT(AxilRRespKnown_A, s_axil_rvalid_o |-> !$isunknown({s_axil_rresp_o, s_axil_rdata_o}),
              clk_i, !rst_ni)
  `TPU_ASSERT(AxiAwKnown_A, m_axi_awvalid_o |-> !$isunknown({m_axi_awid_o, m_axi_awaddr_o,
              m_axi_awlen_o, m_axi_awsize_o, m_axi_awburst_o}), clk_i, !rst_ni)
  `TPU_ASSERT(AxiWKnown_A, m_axi_wvalid_o |-> !$isunknown({m_axi_wstrb_o, m_axi_wlast_o}),
              clk_i, !rst_ni)
  `TPU_ASSERT(AxiArKnown_A, m_axi_arvalid_o |-> !$isunknown({m_axi_arid_o, m_axi_araddr_o,
              m_axi_arlen_o, m_axi_arsize_o, m_axi_arburst_o}), clk_i, !rst_ni)

endmodule
