// Register block: AXI4-Lite slave with every register of docs/isa.md, the interrupt line, the
// performance counters and the soft-reset sequencer.
//
// Performance counters are PerfCntW bits wide: 64 (default) or 32 (small FPGA builds, where nine
// 64-bit adders and their read snapshots cost about a thousand LUT4). Reading _LO snapshots the
// high half into _HI, so a LO-then-HI read pair is consistent; at 32 bits _HI reads 0 and the
// counters wrap at 2^32.
//
// AXI4-Lite: a write is accepted when AW and W are both valid (one cycle, then B); a read is
// accepted when no R response is pending. Undefined offsets (anything but the exact register
// byte offsets) answer SLVERR; reads of them return 0. Writes to read-only registers are ignored.
// rw registers honour wstrb byte by byte.
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
  parameter int unsigned PerfCntW   = 64
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

  localparam logic [1:0] RespOkay   = 2'b00;
  localparam logic [1:0] RespSlvErr = 2'b10;

  localparam int unsigned NumPerf = 9;
  // Order matches the register map: CYCLES, MXU_ACTIVE, WEIGHT_STALL, WEIGHT_SHIFT, DMA_WAIT,
  // ACT_BUSY, INSTRET, RD_BYTES, WR_BYTES at PERF_CYCLES_LO + 8*i.

  // ---------------------------------------------------------------------------------------------
  // Registers
  // ---------------------------------------------------------------------------------------------
  logic [31:0] irq_enable_q, irq_status_q;
  logic [31:0] ring_base_q, ring_size_q, ring_tail_q;
  logic [31:0] win_base_q, win_last_q;
  logic        resetting_q, soft_rst_q;
  logic [PerfCntW-1:0] perf_q [NumPerf];
  logic [31:0]         perf_hi_q [NumPerf];

  // ---------------------------------------------------------------------------------------------
  // AXI4-Lite write
  // ---------------------------------------------------------------------------------------------
  logic        wr_fire;
  logic        bvalid_q;
  logic [1:0]  bresp_q;
  logic [31:0] wmask;
  logic [11:0] waddr;
  logic [31:0] wdata;
  logic        wr_known;

  assign wr_fire          = s_axil_awvalid_i && s_axil_wvalid_i && !bvalid_q;
  assign s_axil_awready_o = wr_fire;
  assign s_axil_wready_o  = wr_fire;
  assign s_axil_bvalid_o  = bvalid_q;
  assign s_axil_bresp_o   = bresp_q;
  assign waddr            = s_axil_awaddr_i;
  assign wdata            = s_axil_wdata_i;
  assign wmask = {{8{s_axil_wstrb_i[3]}}, {8{s_axil_wstrb_i[2]}},
                  {8{s_axil_wstrb_i[1]}}, {8{s_axil_wstrb_i[0]}}};

  function automatic logic addr_known(input logic [11:0] a);
    logic k;
    k = 1'b0;
    if (a == tpu_reg_pkg::REG_ID || a == tpu_reg_pkg::REG_VERSION ||
        a == tpu_reg_pkg::REG_ARRAY_N || a == tpu_reg_pkg::REG_UB_DEPTH ||
        a == tpu_reg_pkg::REG_WB_DEPTH || a == tpu_reg_pkg::REG_ACC_DEPTH ||
        a == tpu_reg_pkg::REG_DMA_DATA_W || a == tpu_reg_pkg::REG_FEATURES ||
        a == tpu_reg_pkg::REG_QUEUE_DEPTH || a == tpu_reg_pkg::REG_CTRL ||
        a == tpu_reg_pkg::REG_STATUS || a == tpu_reg_pkg::REG_IRQ_ENABLE ||
        a == tpu_reg_pkg::REG_IRQ_STATUS || a == tpu_reg_pkg::REG_RING_BASE ||
        a == tpu_reg_pkg::REG_RING_SIZE || a == tpu_reg_pkg::REG_RING_HEAD ||
        a == tpu_reg_pkg::REG_RING_TAIL || a == tpu_reg_pkg::REG_FENCE_VALUE ||
        a == tpu_reg_pkg::REG_FAULT_CAUSE || a == tpu_reg_pkg::REG_FAULT_PC ||
        a == tpu_reg_pkg::REG_FAULT_INFO || a == tpu_reg_pkg::REG_DMA_WIN_BASE ||
        a == tpu_reg_pkg::REG_DMA_WIN_LAST || a == tpu_reg_pkg::REG_PERF_CTRL) begin
      k = 1'b1;
    end
    // PERF_*_LO / _HI: PERF_CYCLES_LO .. PERF_WR_BYTES_HI, word aligned.
    if (a >= tpu_reg_pkg::REG_PERF_CYCLES_LO && a <= tpu_reg_pkg::REG_PERF_WR_BYTES_HI &&
        a[1:0] == 2'b00) begin
      k = 1'b1;
    end
    addr_known = k;
  endfunction

  assign wr_known = addr_known(waddr);

  logic wr_ctrl, wr_irq_en, wr_irq_st, wr_ring_base, wr_ring_size, wr_ring_tail;
  logic wr_win_base, wr_win_last, wr_perf_ctrl;
  assign wr_ctrl      = wr_fire && (waddr == tpu_reg_pkg::REG_CTRL);
  assign wr_irq_en    = wr_fire && (waddr == tpu_reg_pkg::REG_IRQ_ENABLE);
  assign wr_irq_st    = wr_fire && (waddr == tpu_reg_pkg::REG_IRQ_STATUS);
  assign wr_ring_base = wr_fire && (waddr == tpu_reg_pkg::REG_RING_BASE);
  assign wr_ring_size = wr_fire && (waddr == tpu_reg_pkg::REG_RING_SIZE);
  assign wr_ring_tail = wr_fire && (waddr == tpu_reg_pkg::REG_RING_TAIL);
  assign wr_win_base  = wr_fire && (waddr == tpu_reg_pkg::REG_DMA_WIN_BASE);
  assign wr_win_last  = wr_fire && (waddr == tpu_reg_pkg::REG_DMA_WIN_LAST);
  assign wr_perf_ctrl = wr_fire && (waddr == tpu_reg_pkg::REG_PERF_CTRL);

  logic soft_reset_start, perf_clear;
  assign soft_reset_start = wr_ctrl && (wdata[tpu_reg_pkg::REG_CTRL_SOFT_RESET_BIT] &&
                                        wmask[tpu_reg_pkg::REG_CTRL_SOFT_RESET_BIT]);
  assign perf_clear = wr_perf_ctrl && (wdata[tpu_reg_pkg::REG_PERF_CTRL_CLEAR_BIT] &&
                                       wmask[tpu_reg_pkg::REG_PERF_CTRL_CLEAR_BIT]);

  always_ff @(posedge clk_i) begin
    if (!rst_ni) begin
      bvalid_q <= 1'b0;
      bresp_q  <= RespOkay;
    end else if (wr_fire) begin
      bvalid_q <= 1'b1;
      bresp_q  <= wr_known ? RespOkay : RespSlvErr;
    end else if (s_axil_bready_i) begin
      bvalid_q <= 1'b0;
    end
  end

  // Registers kept across a soft reset: DMA window and IRQ enable.
  always_ff @(posedge clk_i) begin
    if (!rst_ni) begin
      irq_enable_q <= '0;
      win_base_q   <= '0;
      win_last_q   <= 32'hFFFF_FFFF;
    end else begin
      if (wr_irq_en)   irq_enable_q <= (irq_enable_q & ~wmask) | (wdata & wmask);
      if (wr_win_base) win_base_q   <= (win_base_q & ~wmask) | (wdata & wmask);
      if (wr_win_last) win_last_q   <= (win_last_q & ~wmask) | (wdata & wmask);
    end
  end

  // IRQ_STATUS bits that exist.
  localparam logic [31:0] IrqMask = (32'd1 << tpu_reg_pkg::REG_IRQ_STATUS_FENCE_BIT) |
                                    (32'd1 << tpu_reg_pkg::REG_IRQ_STATUS_FAULT_BIT);

  // Registers reset by the soft reset too.
  logic [31:0] irq_set;
  always_comb begin
    irq_set = '0;
    irq_set[tpu_reg_pkg::REG_IRQ_STATUS_FENCE_BIT] = irq_fence_set_i;
    irq_set[tpu_reg_pkg::REG_IRQ_STATUS_FAULT_BIT] = irq_fault_set_i;
  end

  always_ff @(posedge clk_i) begin
    if (!rst_ni || soft_rst_q) begin
      irq_status_q <= '0;
      ring_base_q  <= '0;
      ring_size_q  <= '0;
      ring_tail_q  <= '0;
    end else begin
      irq_status_q <= ((irq_status_q & ~(wr_irq_st ? (wdata & wmask) : 32'd0)) | irq_set) & IrqMask;
      if (wr_ring_base) ring_base_q <= (ring_base_q & ~wmask) | (wdata & wmask);
      if (wr_ring_size) ring_size_q <= (ring_size_q & ~wmask) | (wdata & wmask);
      if (wr_ring_tail) ring_tail_q <= (ring_tail_q & ~wmask) | (wdata & wmask);
    end
  end

  // Soft-reset sequencer.
  always_ff @(posedge clk_i) begin
    if (!rst_ni) begin
      resetting_q <= 1'b0;
      soft_rst_q  <= 1'b0;
    end else begin
      soft_rst_q <= 1'b0;
      if (soft_reset_start) resetting_q <= 1'b1;
      if (resetting_q && axi_quiet_i && !soft_rst_q) begin
        soft_rst_q  <= 1'b1;
        resetting_q <= 1'b0;
      end
    end
  end

  assign stop_o     = resetting_q || soft_rst_q;
  assign soft_rst_o = soft_rst_q;

  assign ring_base_o    = ring_base_q;
  assign ring_size_o    = ring_size_q;
  assign ring_tail_o    = (wr_ring_tail) ? ((ring_tail_q & ~wmask) | (wdata & wmask)) : ring_tail_q;
  assign doorbell_o     = wr_ring_tail;
  assign dma_win_base_o = win_base_q;
  assign dma_win_last_o = win_last_q;

  assign irq_o = |(irq_status_q & irq_enable_q);

  // ---------------------------------------------------------------------------------------------
  // Performance counters
  // ---------------------------------------------------------------------------------------------
  logic [PerfCntW-1:0] perf_inc [NumPerf];
  assign perf_inc[0] = PerfCntW'(perf_busy_i);
  assign perf_inc[1] = PerfCntW'(perf_mxu_active_i);
  assign perf_inc[2] = PerfCntW'(perf_weight_stall_i);
  assign perf_inc[3] = PerfCntW'(perf_weight_shift_i);
  assign perf_inc[4] = PerfCntW'(perf_dma_wait_i);
  assign perf_inc[5] = PerfCntW'(perf_act_busy_i);
  assign perf_inc[6] = PerfCntW'(perf_instret_inc_i);
  assign perf_inc[7] = PerfCntW'(perf_rd_bytes_inc_i);
  assign perf_inc[8] = PerfCntW'(perf_wr_bytes_inc_i);

  // Read decode for the perf window.
  logic [11:0] raddr;
  logic        rd_fire;
  logic        rd_perf, rd_perf_hi;
  logic [3:0]  rd_perf_idx;
  logic [11:0] rd_perf_off;
  assign rd_perf     = (raddr >= tpu_reg_pkg::REG_PERF_CYCLES_LO) &&
                       (raddr <= tpu_reg_pkg::REG_PERF_WR_BYTES_HI) && (raddr[1:0] == 2'b00);
  assign rd_perf_off = raddr - tpu_reg_pkg::REG_PERF_CYCLES_LO;
  assign rd_perf_idx = rd_perf_off[6:3];
  assign rd_perf_hi  = rd_perf_off[2];
  logic unused_perf_off;
  assign unused_perf_off = ^{rd_perf_off[11:7], rd_perf_off[1:0]};

  for (genvar i = 0; i < NumPerf; i++) begin : g_perf
    always_ff @(posedge clk_i) begin
      if (!rst_ni || soft_rst_q || perf_clear) begin
        perf_q[i] <= '0;
      end else begin
        perf_q[i] <= perf_q[i] + perf_inc[i];
      end
    end
    if (PerfCntW > 32) begin : g_hi
      always_ff @(posedge clk_i) begin
        if (!rst_ni || soft_rst_q || perf_clear) begin
          perf_hi_q[i] <= '0;
        end else if (rd_fire && rd_perf && !rd_perf_hi && (rd_perf_idx == 4'(i))) begin
          perf_hi_q[i] <= 32'(perf_q[i] >> 32);
        end
      end
    end else begin : g_no_hi
      assign perf_hi_q[i] = '0;
    end
  end

  // ---------------------------------------------------------------------------------------------
  // AXI4-Lite read
  // ---------------------------------------------------------------------------------------------
  logic        rvalid_q;
  logic [31:0] rdata_q;
  logic [1:0]  rresp_q;
  logic [31:0] rdata_d;

  assign raddr            = s_axil_araddr_i;
  assign rd_fire          = s_axil_arvalid_i && !rvalid_q;
  assign s_axil_arready_o = !rvalid_q;
  assign s_axil_rvalid_o  = rvalid_q;
  assign s_axil_rdata_o   = rdata_q;
  assign s_axil_rresp_o   = rresp_q;

  logic [31:0] features;
  always_comb begin
    features = '0;
    features[tpu_reg_pkg::REG_FEATURES_WEIGHT_DOUBLE_BUFFER_BIT] = 1'b1;
    features[tpu_reg_pkg::REG_FEATURES_BIAS_BIT]                 = 1'b1;
    features[tpu_reg_pkg::REG_FEATURES_RELU_BIT]                 = 1'b1;
    features[tpu_reg_pkg::REG_FEATURES_PER_COLUMN_QUANT_BIT]     = 1'b1;
  end

  logic [31:0] status;
  always_comb begin
    status = '0;
    status[tpu_reg_pkg::REG_STATUS_BUSY_BIT]      = busy_i;
    status[tpu_reg_pkg::REG_STATUS_FAULT_BIT]     = faulted_i;
    status[tpu_reg_pkg::REG_STATUS_RESETTING_BIT] = resetting_q || soft_rst_q;
  end

  logic [31:0] ctrl_rd;
  always_comb begin
    ctrl_rd = '0;
    ctrl_rd[tpu_reg_pkg::REG_CTRL_SOFT_RESET_BIT] = resetting_q || soft_rst_q;
  end

  always_comb begin
    rdata_d = '0;
    unique case (raddr)
      tpu_reg_pkg::REG_ID:           rdata_d = tpu_reg_pkg::DEVICE_ID;
      tpu_reg_pkg::REG_VERSION:      rdata_d = tpu_reg_pkg::DEVICE_VERSION;
      tpu_reg_pkg::REG_ARRAY_N:      rdata_d = 32'(ArrayN);
      tpu_reg_pkg::REG_UB_DEPTH:     rdata_d = 32'(UbDepth);
      tpu_reg_pkg::REG_WB_DEPTH:     rdata_d = 32'(WbDepth);
      tpu_reg_pkg::REG_ACC_DEPTH:    rdata_d = 32'(AccDepth);
      tpu_reg_pkg::REG_DMA_DATA_W:   rdata_d = 32'(DmaDataW);
      tpu_reg_pkg::REG_FEATURES:     rdata_d = features;
      tpu_reg_pkg::REG_QUEUE_DEPTH:  rdata_d = 32'(QueueDepth);
      tpu_reg_pkg::REG_CTRL:         rdata_d = ctrl_rd;
      tpu_reg_pkg::REG_STATUS:       rdata_d = status;
      tpu_reg_pkg::REG_IRQ_ENABLE:   rdata_d = irq_enable_q;
      tpu_reg_pkg::REG_IRQ_STATUS:   rdata_d = irq_status_q;
      tpu_reg_pkg::REG_RING_BASE:    rdata_d = ring_base_q;
      tpu_reg_pkg::REG_RING_SIZE:    rdata_d = ring_size_q;
      tpu_reg_pkg::REG_RING_HEAD:    rdata_d = ring_head_i;
      tpu_reg_pkg::REG_RING_TAIL:    rdata_d = ring_tail_q;
      tpu_reg_pkg::REG_FENCE_VALUE:  rdata_d = fence_value_i;
      tpu_reg_pkg::REG_FAULT_CAUSE:  rdata_d = {28'd0, fault_cause_i};
      tpu_reg_pkg::REG_FAULT_PC:     rdata_d = fault_pc_i;
      tpu_reg_pkg::REG_FAULT_INFO:   rdata_d = fault_info_i;
      tpu_reg_pkg::REG_DMA_WIN_BASE: rdata_d = win_base_q;
      tpu_reg_pkg::REG_DMA_WIN_LAST: rdata_d = win_last_q;
      tpu_reg_pkg::REG_PERF_CTRL:    rdata_d = '0;
      default: begin
        if (rd_perf) begin
          rdata_d = rd_perf_hi ? perf_hi_q[rd_perf_idx] : perf_q[rd_perf_idx][31:0];
        end
      end
    endcase
  end

  always_ff @(posedge clk_i) begin
    if (!rst_ni) begin
      rvalid_q <= 1'b0;
      rdata_q  <= '0;
      rresp_q  <= RespOkay;
    end else if (rd_fire) begin
      rvalid_q <= 1'b1;
      rdata_q  <= rdata_d;
      rresp_q  <= addr_known(raddr) ? RespOkay : RespSlvErr;
    end else if (s_axil_rready_i) begin
      rvalid_q <= 1'b0;
    end
  end

  // ---------------------------------------------------------------------------------------------
  // Assertions
  // ---------------------------------------------------------------------------------------------
  `TPU_ASSERT(BValidStable_A, bvalid_q && !s_axil_bready_i |=> bvalid_q, clk_i, !rst_ni)
  `TPU_ASSERT(RValidStable_A, rvalid_q && !s_axil_rready_i |=> rvalid_q && $stable(rdata_q),
              clk_i, !rst_ni)
  `TPU_ASSERT_NEVER(SoftRstWhileBusyAxi_A, soft_rst_q && !axi_quiet_i, clk_i, !rst_ni)
  `TPU_ASSERT_INIT(PerfIdxFits_A, NumPerf <= 16)
  `TPU_ASSERT_INIT(PerfCntW_A, PerfCntW == 32 || PerfCntW == 64)

endmodule
