// Register block: the device-specific half. The storage, address decode and access semantics of
// every register of docs/isa.md are generated (tpu_reg_top, from firmware/spec/tpuw.toml); this
// module adds what is particular to the device: the doorbell, the interrupt line, the
// performance counters with their _HI snapshots, the soft-reset sequencer and the read-only
// values that come from the command processor and the parameters.
//
// Performance counters are PerfCntW bits wide: 64 (default) or 32 (small FPGA builds, where nine
// 64-bit adders and their read snapshots cost about a thousand LUT4). Reading _LO snapshots the
// high half into _HI, so a LO-then-HI read pair is consistent; at 32 bits _HI reads 0 and the
// counters wrap at 2^32.
//
// AXI4-Lite behaviour (handshake, SLVERR on undefined offsets, wstrb, ignored writes to read-only
// registers) is described in the generated tpu_reg_top.sv.
//
// Soft reset: writing CTRL.SOFT_RESET sets `stop_o` (the command processor and DMA engines stop
// starting new work); once `axi_quiet_i` reports no outstanding AXI transaction, `soft_rst_o`
// pulses for one cycle and resets everything else in the device and every register here except
// DMA_WIN_BASE, DMA_WIN_LAST and IRQ_ENABLE. This block itself runs on rst_ni only.
`include "tpu_assert.svh"

module tpu_reg_block #(
  parameter int unsigned ArrayN     = 16,
  parameter int unsigned UbDepth    = 32768,
  parameter int unsigned WbDepth    = 4096,
  parameter int unsigned AccDepth   = 4096,
  parameter int unsigned DmaDataW   = 128,
  parameter int unsigned QueueDepth = 8,
  parameter int unsigned PerfCntW   = 64,
  parameter bit          EnableBf16 = 1'b1,
  parameter bit          EnableLut  = 1'b1
) (
  input  logic        clk_i,
  input  logic        rst_ni,

  // AXI4-Lite slave
  input  logic [11:0] s_axil_awaddr_i,
  input  logic        s_axil_awvalid_i,
  output logic        s_axil_awready_o,
  input  logic [31:0] s_axil_wdata_i,
  input  logic [3:0]  s_axil_wstrb_i,
  input  logic        s_axil_wvalid_i,
  output logic        s_axil_wready_o,
  output logic [1:0]  s_axil_bresp_o,
  output logic        s_axil_bvalid_o,
  input  logic        s_axil_bready_i,
  input  logic [11:0] s_axil_araddr_i,
  input  logic        s_axil_arvalid_i,
  output logic        s_axil_arready_o,
  output logic [31:0] s_axil_rdata_o,
  output logic [1:0]  s_axil_rresp_o,
  output logic        s_axil_rvalid_o,
  input  logic        s_axil_rready_i,

  output logic        irq_o,

  // to the command processor
  output logic [31:0] ring_base_o,
  output logic [31:0] ring_size_o,
  output logic [31:0] ring_tail_o,
  output logic        doorbell_o,      // pulse: RING_TAIL was written (value visible the same cycle)
  output logic [31:0] dma_win_base_o,
  output logic [31:0] dma_win_last_o,

  // from the command processor
  input  logic        busy_i,
  input  logic        faulted_i,
  input  logic [31:0] ring_head_i,
  input  logic [31:0] fence_value_i,
  input  logic [3:0]  fault_cause_i,
  input  logic [31:0] fault_pc_i,
  input  logic [31:0] fault_info_i,
  input  logic        irq_fence_set_i,  // pulse
  input  logic        irq_fault_set_i,  // pulse

  // soft reset sequencing
  input  logic        axi_quiet_i,      // no AXI transaction outstanding or being offered
  output logic        stop_o,           // soft reset requested: start nothing new
  output logic        soft_rst_o,       // one-cycle reset pulse for the rest of the device

  // performance events (per cycle)
  input  logic        perf_busy_i,
  input  logic        perf_mxu_active_i,
  input  logic        perf_weight_stall_i,
  input  logic        perf_weight_shift_i,
  input  logic        perf_dma_wait_i,
  input  logic        perf_act_busy_i,
  input  logic [2:0]  perf_instret_inc_i,
  input  logic [15:0] perf_rd_bytes_inc_i,
  input  logic [15:0] perf_wr_bytes_inc_i
);

  localparam int unsigned NumPerf = 9;
  // Order matches the register map: CYCLES, MXU_ACTIVE, WEIGHT_STALL, WEIGHT_SHIFT, DMA_WAIT,
  // ACT_BUSY, INSTRET, RD_BYTES, WR_BYTES at PERF_CYCLES_LO + 8*i.

  // ---------------------------------------------------------------------------------------------
  // Storage and access semantics: the generated register block
  // ---------------------------------------------------------------------------------------------
  tpu_reg_pkg::reg2hw_t reg2hw;
  tpu_reg_pkg::hw2reg_t hw2reg;
  logic                 soft_rst_q;

  tpu_reg_top u_reg_top (
    .clk_i, .rst_ni, .soft_rst_i(soft_rst_q),
    .s_axil_awaddr_i, .s_axil_awvalid_i, .s_axil_awready_o,
    .s_axil_wdata_i, .s_axil_wstrb_i, .s_axil_wvalid_i, .s_axil_wready_o,
    .s_axil_bresp_o, .s_axil_bvalid_o, .s_axil_bready_i,
    .s_axil_araddr_i, .s_axil_arvalid_i, .s_axil_arready_o,
    .s_axil_rdata_o, .s_axil_rresp_o, .s_axil_rvalid_o, .s_axil_rready_i,
    .reg2hw_o(reg2hw), .hw2reg_i(hw2reg)
  );

  // ---------------------------------------------------------------------------------------------
  // Soft-reset sequencer
  // ---------------------------------------------------------------------------------------------
  logic resetting_q;
  always_ff @(posedge clk_i) begin
    if (!rst_ni) begin
      resetting_q <= 1'b0;
      soft_rst_q  <= 1'b0;
    end else begin
      soft_rst_q <= 1'b0;
      if (reg2hw.ctrl.soft_reset.q) resetting_q <= 1'b1;
      if (resetting_q && axi_quiet_i && !soft_rst_q) begin
        soft_rst_q  <= 1'b1;
        resetting_q <= 1'b0;
      end
    end
  end

  assign stop_o     = resetting_q || soft_rst_q;
  assign soft_rst_o = soft_rst_q;

  // ---------------------------------------------------------------------------------------------
  // Command processor interface: ring, doorbell, DMA window, interrupt
  // ---------------------------------------------------------------------------------------------
  // The doorbell is the RING_TAIL write itself; the command processor sees the new tail in the
  // same cycle.
  assign ring_base_o    = reg2hw.ring_base.q;
  assign ring_size_o    = reg2hw.ring_size.q;
  assign ring_tail_o    = reg2hw.ring_tail.qe ? reg2hw.ring_tail.wd : reg2hw.ring_tail.q;
  assign doorbell_o     = reg2hw.ring_tail.qe;
  assign dma_win_base_o = reg2hw.dma_win_base.q;
  assign dma_win_last_o = reg2hw.dma_win_last.q;

  assign irq_o = (reg2hw.irq_status.fence.q && reg2hw.irq_enable.fence.q) ||
                 (reg2hw.irq_status.fault.q && reg2hw.irq_enable.fault.q);

  assign hw2reg.irq_status.fence.d  = 1'b1;
  assign hw2reg.irq_status.fence.de = irq_fence_set_i;
  assign hw2reg.irq_status.fault.d  = 1'b1;
  assign hw2reg.irq_status.fault.de = irq_fault_set_i;

  // ---------------------------------------------------------------------------------------------
  // Read-only values
  // ---------------------------------------------------------------------------------------------
  assign hw2reg.array_n.d     = 32'(ArrayN);
  assign hw2reg.ub_depth.d    = 32'(UbDepth);
  assign hw2reg.wb_depth.d    = 32'(WbDepth);
  assign hw2reg.acc_depth.d   = 32'(AccDepth);
  assign hw2reg.dma_data_w.d  = 32'(DmaDataW);
  assign hw2reg.queue_depth.d = 32'(QueueDepth);
  // TRANSPOSE (tpu_transpose) and LOADW transpose (tpu_mxu).
  assign hw2reg.features.transpose.d = 1'b1;
  // bf16 MXU mode, fp32 ACTIVATE and the VECTOR unit: the build parameter.
  assign hw2reg.features.bf16.d      = EnableBf16;
  // ACTIVATE `lut` (tpu_act_seq / tpu_act_unit): the build parameter.
  assign hw2reg.features.lut.d       = EnableLut;
  assign hw2reg.ctrl.soft_reset.d      = resetting_q || soft_rst_q;
  assign hw2reg.status.busy.d          = busy_i;
  assign hw2reg.status.fault.d         = faulted_i;
  assign hw2reg.status.resetting.d     = resetting_q || soft_rst_q;
  assign hw2reg.ring_head.d   = ring_head_i;
  assign hw2reg.fence_value.d = fence_value_i;
  assign hw2reg.fault_cause.d = fault_cause_i;
  assign hw2reg.fault_pc.d    = fault_pc_i;
  assign hw2reg.fault_info.d  = fault_info_i;
  assign hw2reg.perf_ctrl.clear.d = 1'b0;

  // ---------------------------------------------------------------------------------------------
  // Performance counters
  // ---------------------------------------------------------------------------------------------
  logic                perf_clear;
  logic [PerfCntW-1:0] perf_q [NumPerf];
  logic [31:0]         perf_hi_q [NumPerf];
  logic [PerfCntW-1:0] perf_inc [NumPerf];
  logic [NumPerf-1:0]  perf_lo_re;   // software reads PERF_*_LO: latch the high half
  logic [31:0]         perf_lo [NumPerf];

  assign perf_clear = reg2hw.perf_ctrl.clear.q;

  assign perf_inc[0] = PerfCntW'(perf_busy_i);
  assign perf_inc[1] = PerfCntW'(perf_mxu_active_i);
  assign perf_inc[2] = PerfCntW'(perf_weight_stall_i);
  assign perf_inc[3] = PerfCntW'(perf_weight_shift_i);
  assign perf_inc[4] = PerfCntW'(perf_dma_wait_i);
  assign perf_inc[5] = PerfCntW'(perf_act_busy_i);
  assign perf_inc[6] = PerfCntW'(perf_instret_inc_i);
  assign perf_inc[7] = PerfCntW'(perf_rd_bytes_inc_i);
  assign perf_inc[8] = PerfCntW'(perf_wr_bytes_inc_i);

  assign perf_lo_re = {reg2hw.perf_wr_bytes_lo.re, reg2hw.perf_rd_bytes_lo.re,
                       reg2hw.perf_instret_lo.re, reg2hw.perf_act_busy_lo.re,
                       reg2hw.perf_dma_wait_lo.re, reg2hw.perf_weight_shift_lo.re,
                       reg2hw.perf_weight_stall_lo.re, reg2hw.perf_mxu_active_lo.re,
                       reg2hw.perf_cycles_lo.re};

  for (genvar i = 0; i < NumPerf; i++) begin : g_perf
    tpu_counter #(.Width(PerfCntW), .CountDown(1'b0)) u_cnt (
      .clk_i, .rst_ni, .clr_i(soft_rst_q || perf_clear), .incr_i(perf_inc[i]),
      .decr_i('0), .q_o(perf_q[i])
    );
    assign perf_lo[i] = perf_q[i][31:0];
    if (PerfCntW > 32) begin : g_hi
      always_ff @(posedge clk_i) begin
        if (!rst_ni || soft_rst_q || perf_clear) begin
          perf_hi_q[i] <= '0;
        end else if (perf_lo_re[i]) begin
          perf_hi_q[i] <= 32'(perf_q[i] >> 32);
        end
      end
    end else begin : g_no_hi
      assign perf_hi_q[i] = '0;
      logic unused_re;
      assign unused_re = perf_lo_re[i];
    end
  end

  assign hw2reg.perf_cycles_lo.d       = perf_lo[0];
  assign hw2reg.perf_cycles_hi.d       = perf_hi_q[0];
  assign hw2reg.perf_mxu_active_lo.d   = perf_lo[1];
  assign hw2reg.perf_mxu_active_hi.d   = perf_hi_q[1];
  assign hw2reg.perf_weight_stall_lo.d = perf_lo[2];
  assign hw2reg.perf_weight_stall_hi.d = perf_hi_q[2];
  assign hw2reg.perf_weight_shift_lo.d = perf_lo[3];
  assign hw2reg.perf_weight_shift_hi.d = perf_hi_q[3];
  assign hw2reg.perf_dma_wait_lo.d     = perf_lo[4];
  assign hw2reg.perf_dma_wait_hi.d     = perf_hi_q[4];
  assign hw2reg.perf_act_busy_lo.d     = perf_lo[5];
  assign hw2reg.perf_act_busy_hi.d     = perf_hi_q[5];
  assign hw2reg.perf_instret_lo.d      = perf_lo[6];
  assign hw2reg.perf_instret_hi.d      = perf_hi_q[6];
  assign hw2reg.perf_rd_bytes_lo.d     = perf_lo[7];
  assign hw2reg.perf_rd_bytes_hi.d     = perf_hi_q[7];
  assign hw2reg.perf_wr_bytes_lo.d     = perf_lo[8];
  assign hw2reg.perf_wr_bytes_hi.d     = perf_hi_q[8];

  // ---------------------------------------------------------------------------------------------
  // Assertions
  // ---------------------------------------------------------------------------------------------
  `TPU_ASSERT_NEVER(SoftRstWhileBusyAxi_A, soft_rst_q && !axi_quiet_i, clk_i, !rst_ni)
  `TPU_ASSERT_INIT(PerfCntW_A, PerfCntW == 32 || PerfCntW == 64)

endmodule
