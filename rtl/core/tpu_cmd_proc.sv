// Command processor: ring fetch (AXI read bursts into a prefetch buffer), decode + validation,
// in-order dispatch into the LOAD / COMPUTE / STORE instruction queues, VTA-style dependency
// tokens, FENCE, fault capture and reporting, RING_HEAD and the command-processor performance
// events.
//
// Pipeline and cycle costs (see the report in the commit history / docs):
//  * fetch: a burst is issued when the prefetch buffer (FetchDepth instructions, counting those
//    in flight) has room for at least half of it or for everything up to RING_TAIL / the 4 KiB
//    boundary; instructions reach decode the cycle after their last beat arrives.
//  * decode + dispatch: one instruction per cycle from the prefetch head into its queue
//    (combinational validation); the queue head is offered to its engine the next cycle.
//  * issue: a queue head is offered to its engine in the same cycle its tokens are available;
//    a token pushed by a `done` pulse is visible one cycle later.
//  * FENCE: waits until every queue is empty and every engine idle, then offers AW
//    (AWID 1), then W in the cycle after AW is accepted (one beat, wstrb = the 4 addressed
//    bytes), then waits for B; FENCE_VALUE / IRQ_STATUS.FENCE update the cycle after B and
//    dispatch resumes in that cycle.
`include "tpu_assert.svh"

module tpu_cmd_proc #(
  parameter int unsigned ArrayN     = 16,
  parameter int unsigned UbDepth    = 32768,
  parameter int unsigned WbDepth    = 4096,
  parameter int unsigned AccDepth   = 4096,
  parameter int unsigned DmaDataW   = 128,
  parameter int unsigned QueueDepth = 8,
  parameter int unsigned FetchDepth = 16,  // prefetch buffer, instructions
  parameter int unsigned InflightDepth = 8, // issued-but-not-done instructions per engine
  parameter bit          EnableBf16 = 1'b1, // bf16 mode bits legal (tpu_decode)
  parameter bit          EnableLut  = 1'b1  // ACTIVATE `lut` legal (tpu_decode)
) (
  input  logic                  clk_i,
  input  logic                  rst_ni,
  input  logic                  stop_i,          // soft reset pending: start nothing new

  // register block
  input  logic [31:0]           ring_base_i,
  input  logic [31:0]           ring_size_i,
  input  logic [31:0]           ring_tail_i,
  input  logic                  doorbell_i,
  input  logic [31:0]           dma_win_base_i,
  input  logic [31:0]           dma_win_last_i,
  output logic                  busy_o,
  output logic                  faulted_o,
  output logic [31:0]           ring_head_o,
  output logic [31:0]           fence_value_o,
  output logic [3:0]            fault_cause_o,
  output logic [31:0]           fault_pc_o,
  output logic [31:0]           fault_info_o,
  output logic                  irq_fence_set_o,
  output logic                  irq_fault_set_o,
  output logic                  perf_dma_wait_o,
  output logic [2:0]            perf_instret_inc_o,

  // instruction fetch: AXI read (ARID 0 is set by the top)
  output logic                  f_arvalid_o,
  input  logic                  f_arready_i,
  output logic [31:0]           f_araddr_o,
  output logic [7:0]            f_arlen_o,
  input  logic                  f_rvalid_i,
  output logic                  f_rready_o,
  input  logic [DmaDataW-1:0]   f_rdata_i,
  input  logic [1:0]            f_rresp_i,
  input  logic                  f_rlast_i,

  // FENCE write: AXI write (AWID 1 is set by the top)
  output logic                  fw_awvalid_o,
  input  logic                  fw_awready_i,
  output logic [31:0]           fw_awaddr_o,
  output logic                  fw_wvalid_o,
  input  logic                  fw_wready_i,
  output logic [DmaDataW-1:0]   fw_wdata_o,
  output logic [DmaDataW/8-1:0] fw_wstrb_o,
  input  logic                  fw_bvalid_i,
  output logic                  fw_bready_o,
  input  logic [1:0]            fw_bresp_i,

  // LOAD engine
  output logic                  ld_valid_o,
  input  logic                  ld_ready_i,
  output tpu_isa_pkg::load_t    ld_instr_o,
  output logic [31:0]           ld_pc_o,
  input  logic                  ld_done_i,
  input  logic                  ld_idle_i,
  input  logic                  ld_err_i,        // pulse: AXI error, with the failing burst
  input  logic [31:0]           ld_err_addr_i,
  input  logic [31:0]           ld_err_pc_i,

  // COMPUTE engine (tpu_datapath)
  output logic                  cmp_valid_o,
  input  logic                  cmp_ready_i,
  output tpu_isa_pkg::instr_t   cmp_instr_o,
  input  logic                  cmp_done_i,
  input  logic                  cmp_idle_i,

  // STORE engine
  output logic                  st_valid_o,
  input  logic                  st_ready_i,
  output tpu_isa_pkg::store_t   st_instr_o,
  output logic [31:0]           st_pc_o,
  input  logic                  st_done_i,
  input  logic                  st_idle_i,
  input  logic                  st_err_i,
  input  logic [31:0]           st_err_addr_i,
  input  logic [31:0]           st_err_pc_i
);

  localparam int unsigned BeatBytes    = DmaDataW / 8;
  localparam int unsigned LogBeat      = $clog2(BeatBytes);


  localparam logic [3:0] CauseAxi   = 4'(tpu_isa_pkg::FaultAxiError);
  localparam logic [3:0] CauseRing  = 4'(tpu_isa_pkg::FaultRingConfig);
  localparam logic [3:0] CauseToken = 4'(tpu_isa_pkg::FaultTokenOverflow);

  // =============================================================================================
  // Fault state (declared early: fetch and dispatch stop on it)
  // =============================================================================================
  logic        fault_pend_q;   // captured, draining
  logic        faulted_q;      // reported
  logic [3:0]  fault_cause_q;
  logic [31:0] fault_pc_q, fault_info_q;
  logic        halt;           // no more fetch / dispatch
  assign halt = fault_pend_q || faulted_q || stop_i;

  // =============================================================================================
  // Ring pointers
  // =============================================================================================
  logic [31:0] head_q;         // next instruction to decode
  logic        head_adv;

  function automatic logic [31:0] ring_next(input logic [31:0] p, input logic [31:0] n,
                                            input logic [31:0] size);
    logic [32:0] s;
    s = {1'b0, p} + {1'b0, n};
    if (s >= {1'b0, size}) ring_next = 32'(s - {1'b0, size});
    else ring_next = s[31:0];
  endfunction

  // =============================================================================================
  // Fetch (tpu_cmd_fetch: ring reads into the prefetch buffer)
  // =============================================================================================
  logic                pf_valid, pf_err, pf_pop;
  tpu_isa_pkg::instr_t pf_instr;

  tpu_cmd_fetch #(.DmaDataW(DmaDataW), .FetchDepth(FetchDepth)) u_fetch (
    .clk_i, .rst_ni, .halt_i(halt),
    .ring_base_i, .ring_size_i, .ring_tail_i,
    .f_arvalid_o, .f_arready_i, .f_araddr_o, .f_arlen_o,
    .f_rvalid_i, .f_rready_o, .f_rdata_i, .f_rresp_i, .f_rlast_i,
    .instr_valid_o(pf_valid), .instr_o(pf_instr), .instr_err_o(pf_err), .instr_pop_i(pf_pop)
  );

  // =============================================================================================
  // Decode
  // =============================================================================================
  tpu_isa_pkg::instr_t d_instr;
  logic         d_ferr;
  logic [31:0]  d_pc;
  logic         d_fault;
  logic [3:0]   d_cause;
  logic [31:0]  d_info;
  logic [1:0]   d_queue;

  assign d_instr = pf_instr;
  tpu_isa_pkg::fence_t d_fence;   // the same bits, seen as a FENCE
  assign d_fence = d_instr;
  assign d_ferr  = pf_err;
  assign d_pc    = ring_base_i + {head_q[27:0], 4'b0000};

  tpu_decode #(
    .ArrayN(ArrayN), .UbDepth(UbDepth), .WbDepth(WbDepth), .AccDepth(AccDepth),
    .DmaDataW(DmaDataW), .EnableBf16(EnableBf16), .EnableLut(EnableLut)
  ) u_decode (
    .instr_i(d_instr), .win_base_i(dma_win_base_i), .win_last_i(dma_win_last_i),
    .fault_o(d_fault), .cause_o(d_cause), .info_o(d_info), .queue_o(d_queue)
  );

  // Token overflow (decode time): per counter, the tokens pushed minus those popped by the
  // instructions dispatched so far, in program order. It lies in [-QueueDepth, TOKEN_MAX]: a pop
  // that is dispatched waits in its queue until its token arrives, so at most QueueDepth of them
  // run ahead. The live counters below hold at most TOKEN_MAX + QueueDepth and never wrap.
  localparam int unsigned TokBalW = 10;
  localparam logic [TokBalW-1:0] TokMax = TokBalW'(tpu_isa_pkg::TOKEN_MAX);
  logic [TokBalW-1:0] tok_bal_q [4];   // two's complement, index = tpu_isa_pkg::token_e
  logic [3:0]         d_tok_push, d_tok_pop, d_tok_over;
  logic               d_tok_fault;
  logic [31:0]        d_tok_info;

  always_comb begin
    d_tok_push = '0;
    d_tok_pop  = '0;
    case (d_queue)
      2'(tpu_isa_pkg::QueueLoad): begin
        d_tok_push[tpu_isa_pkg::TokenLd2cmp] = d_instr.hdr.push_next;
        d_tok_pop[tpu_isa_pkg::TokenCmp2ld]  = d_instr.hdr.pop_next;
      end
      2'(tpu_isa_pkg::QueueCompute): begin
        d_tok_push[tpu_isa_pkg::TokenCmp2ld] = d_instr.hdr.push_prev;
        d_tok_push[tpu_isa_pkg::TokenCmp2st] = d_instr.hdr.push_next;
        d_tok_pop[tpu_isa_pkg::TokenLd2cmp]  = d_instr.hdr.pop_prev;
        d_tok_pop[tpu_isa_pkg::TokenSt2cmp]  = d_instr.hdr.pop_next;
      end
      2'(tpu_isa_pkg::QueueStore): begin
        d_tok_push[tpu_isa_pkg::TokenSt2cmp] = d_instr.hdr.push_prev;
        d_tok_pop[tpu_isa_pkg::TokenCmp2st]  = d_instr.hdr.pop_prev;
      end
      default: ;
    endcase
    for (int i = 0; i < 4; i++) begin
      d_tok_over[i] = d_tok_push[i] && !tok_bal_q[i][TokBalW-1] && (tok_bal_q[i] >= TokMax);
    end
    d_tok_fault = |d_tok_over;
    d_tok_info  = '0;
    for (int i = 3; i >= 0; i--) begin
      if (d_tok_over[i]) d_tok_info = 32'(i);
    end
  end

  // =============================================================================================
  // Dispatch
  // =============================================================================================
  logic fence_active_q;
  logic d_valid, d_take, d_fault_take, d_fence_take;
  logic q_full, q_push;

  assign d_valid = pf_valid && !halt && !fence_active_q;

  assign d_fault_take = d_valid && (d_ferr || d_fault || d_tok_fault);
  assign d_fence_take = d_valid && !d_fault_take && (d_queue == 2'(tpu_isa_pkg::QueueCtrl));
  assign d_take       = d_valid && !d_fault_take && !q_full;   // includes FENCE

  assign q_push   = d_take && (d_queue != 2'(tpu_isa_pkg::QueueCtrl));
  assign pf_pop   = d_take;
  assign head_adv = d_take;

  always_ff @(posedge clk_i) begin
    if (!rst_ni) begin
      head_q <= '0;
    end else if (head_adv) begin
      head_q <= ring_next(head_q, 32'd1, ring_size_i);
    end
  end

  always_ff @(posedge clk_i) begin
    if (!rst_ni) begin
      for (int i = 0; i < 4; i++) tok_bal_q[i] <= '0;
    end else if (d_take) begin
      for (int i = 0; i < 4; i++) begin
        tok_bal_q[i] <= tok_bal_q[i] + TokBalW'(d_tok_push[i]) - TokBalW'(d_tok_pop[i]);
      end
    end
  end

  // =============================================================================================
  // Queues, tokens and issue (tpu_cmd_dispatch)
  // =============================================================================================
  logic engines_idle;
  tpu_cmd_dispatch #(.QueueDepth(QueueDepth), .InflightDepth(InflightDepth)) u_dispatch (
    .clk_i, .rst_ni,
    .push_i(q_push), .queue_i(d_queue), .instr_i(d_instr), .pc_i(d_pc), .full_o(q_full),
    .ld_valid_o, .ld_ready_i, .ld_instr_o, .ld_pc_o, .ld_done_i, .ld_idle_i,
    .cmp_valid_o, .cmp_ready_i, .cmp_instr_o, .cmp_done_i, .cmp_idle_i,
    .st_valid_o, .st_ready_i, .st_instr_o, .st_pc_o, .st_done_i, .st_idle_i,
    .idle_o(engines_idle), .perf_dma_wait_o
  );

  // =============================================================================================
  // FENCE
  // =============================================================================================
  logic        fw_aw_q, fw_w_q, fw_wait_b_q;
  logic [31:0] fence_addr_q, fence_val_q, fence_pc_q, fence_value_q;
  logic        fence_irq_q;
  logic        fence_start, fence_b, fence_b_err, fence_ok;
  logic        irq_fence_q;

  assign fence_start = fence_active_q && !fw_wait_b_q && !fw_aw_q && !fw_w_q && engines_idle &&
                       !stop_i && !fault_pend_q;
  assign fence_b     = fw_wait_b_q && fw_bvalid_i && !fw_aw_q && !fw_w_q;
  assign fence_b_err = fence_b && fw_bresp_i[1];
  assign fence_ok    = fence_b && !fw_bresp_i[1] && !fault_pend_q;

  always_ff @(posedge clk_i) begin
    if (!rst_ni) begin
      fence_active_q <= 1'b0;
      fw_aw_q        <= 1'b0;
      fw_w_q         <= 1'b0;
      fw_wait_b_q    <= 1'b0;
      fence_addr_q   <= '0;
      fence_val_q    <= '0;
      fence_pc_q     <= '0;
      fence_irq_q    <= 1'b0;
      fence_value_q  <= '0;
      irq_fence_q    <= 1'b0;
    end else begin
      irq_fence_q <= 1'b0;
      if (d_fence_take && d_take) begin
        fence_active_q <= 1'b1;
        fence_addr_q   <= d_fence.host_addr;
        fence_val_q    <= d_fence.value;
        fence_irq_q    <= d_fence.irq;
        fence_pc_q     <= d_pc;
      end
      // a fault captured while the fence waits for the drain cancels it (nothing is written)
      if (fence_active_q && !fw_wait_b_q && fault_pend_q) fence_active_q <= 1'b0;
      if (fence_start) begin
        fw_aw_q     <= 1'b1;
        fw_wait_b_q <= 1'b1;
      end
      // W follows the accepted AW (never before it)
      if (fw_aw_q && fw_awready_i) begin
        fw_aw_q <= 1'b0;
        fw_w_q  <= 1'b1;
      end
      if (fw_w_q && fw_wready_i)   fw_w_q  <= 1'b0;
      if (fence_b) begin
        fw_wait_b_q    <= 1'b0;
        fence_active_q <= 1'b0;
      end
      if (fence_ok) begin
        fence_value_q <= fence_val_q;
        irq_fence_q   <= fence_irq_q;
      end
    end
  end

  // AW address: the beat containing the word; the four addressed byte lanes are strobed.
  logic [LogBeat-1:0] fence_lane;
  assign fence_lane   = fence_addr_q[LogBeat-1:0];
  assign fw_awvalid_o = fw_aw_q;
  assign fw_awaddr_o  = {fence_addr_q[31:LogBeat], {LogBeat{1'b0}}};
  assign fw_wvalid_o  = fw_w_q;
  assign fw_wdata_o   = {(DmaDataW / 32){fence_val_q}};
  localparam logic [BeatBytes-1:0] Strb4 = BeatBytes'(4'hF);
  assign fw_wstrb_o   = Strb4 << fence_lane;
  assign fw_bready_o  = 1'b1;

  // =============================================================================================
  // Faults
  // =============================================================================================
  logic        ring_bad;
  logic        cap;
  logic [3:0]  cap_cause;
  logic [31:0] cap_pc, cap_info;
  logic        irq_fault_q;

  assign ring_bad = doorbell_i && !stop_i &&
                    ((ring_size_i == 32'd0) || (ring_base_i[3:0] != 4'd0) ||
                     (ring_tail_i >= ring_size_i));

  // First fault wins; sources in priority order for the same cycle.
  always_comb begin
    cap       = 1'b0;
    cap_cause = '0;
    cap_pc    = '0;
    cap_info  = '0;
    if (ld_err_i) begin
      cap = 1'b1; cap_cause = CauseAxi; cap_pc = ld_err_pc_i; cap_info = ld_err_addr_i;
    end else if (st_err_i) begin
      cap = 1'b1; cap_cause = CauseAxi; cap_pc = st_err_pc_i; cap_info = st_err_addr_i;
    end else if (fence_b_err) begin
      cap = 1'b1; cap_cause = CauseAxi; cap_pc = fence_pc_q; cap_info = fence_addr_q;
    end else if (d_fault_take) begin
      cap       = 1'b1;
      cap_cause = d_ferr ? CauseAxi : d_fault ? d_cause : CauseToken;
      cap_pc    = d_pc;
      // fetch error: the instruction's address; token overflow: the counter
      cap_info  = d_ferr ? d_pc : d_fault ? d_info : d_tok_info;
    end else if (ring_bad) begin
      cap = 1'b1; cap_cause = CauseRing; cap_pc = d_pc; cap_info = ring_tail_i;
    end
  end

  logic fault_report;
  assign fault_report = fault_pend_q && engines_idle && !fence_active_q;

  always_ff @(posedge clk_i) begin
    if (!rst_ni) begin
      fault_pend_q  <= 1'b0;
      faulted_q     <= 1'b0;
      fault_cause_q <= '0;
      fault_pc_q    <= '0;
      fault_info_q  <= '0;
      irq_fault_q   <= 1'b0;
    end else begin
      irq_fault_q <= 1'b0;
      if (cap && !fault_pend_q && !faulted_q) begin
        fault_pend_q  <= 1'b1;
        fault_cause_q <= cap_cause;
        fault_pc_q    <= cap_pc;
        fault_info_q  <= cap_info;
      end
      if (fault_report) begin
        fault_pend_q <= 1'b0;
        faulted_q    <= 1'b1;
        irq_fault_q  <= 1'b1;
      end
    end
  end

  // =============================================================================================
  // Outputs
  // =============================================================================================
  assign faulted_o       = faulted_q;
  assign fault_cause_o   = faulted_q ? fault_cause_q : 4'd0;
  assign fault_pc_o      = faulted_q ? fault_pc_q : 32'd0;
  assign fault_info_o    = faulted_q ? fault_info_q : 32'd0;
  assign ring_head_o     = head_q;
  assign fence_value_o   = fence_value_q;
  assign irq_fence_set_o = irq_fence_q;
  assign irq_fault_set_o = irq_fault_q;
  assign busy_o          = ((head_q != ring_tail_i) && !faulted_q) || fence_active_q ||
                           !engines_idle || fault_pend_q;
  assign perf_instret_inc_o = 3'(ld_done_i) + 3'(cmp_done_i) + 3'(st_done_i) + 3'(fence_ok);

  // Deliberately unused: LOAD has no push_prev, STORE no push_next (rejected at decode);
  // OKAY vs EXOKAY is not distinguished.
  logic unused_bits;
  // A fetch error reports the failing instruction's own address (docs/perf_model.md, AXI_ERROR
  // rule), so the burst address need not travel with the instruction.
  assign unused_bits = ^{fw_bresp_i[0], d_fence.rsvd96, d_fence.rsvd13, d_fence.hdr};

  // =============================================================================================
  // Assertions
  // =============================================================================================
  `TPU_ASSERT(FenceAwStable_A, fw_awvalid_o && !fw_awready_i |=> fw_awvalid_o &&
              $stable(fw_awaddr_o), clk_i, !rst_ni)
  `TPU_ASSERT(FenceWStable_A, fw_wvalid_o && !fw_wready_i |=> fw_wvalid_o && $stable(fw_wdata_o)
              && $stable(fw_wstrb_o), clk_i, !rst_ni)
  `TPU_ASSERT_NEVER(FenceBUnexpected_A, fw_bvalid_i && !fw_wait_b_q, clk_i, !rst_ni)
  `TPU_ASSERT_NEVER(FaultStates_A, fault_pend_q && faulted_q, clk_i, !rst_ni)
  // live token counters (8 bits) hold at most TOKEN_MAX + QueueDepth; the balance fits TokBalW
  `TPU_ASSERT_INIT(TokenRange_A, tpu_isa_pkg::TOKEN_MAX + QueueDepth <= 255 && QueueDepth < 256)

endmodule
