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
  parameter int unsigned InflightDepth = 8 // issued-but-not-done instructions per engine
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
  localparam int unsigned BeatsPerInstr = (DmaDataW >= 128) ? 1 : 128 / DmaDataW;
  localparam int unsigned BpiW         = (BeatsPerInstr > 1) ? $clog2(BeatsPerInstr) : 1;
  localparam int unsigned MaxBurstInstr = 256 / BeatsPerInstr;
  localparam int unsigned FCntW        = $clog2(FetchDepth + 1);
  localparam int unsigned FifoCntW     = $clog2(FetchDepth + 1);


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
  logic [31:0] fptr_q;         // next instruction to fetch
  logic        head_adv;

  function automatic logic [31:0] ring_next(input logic [31:0] p, input logic [31:0] n,
                                            input logic [31:0] size);
    logic [32:0] s;
    s = {1'b0, p} + {1'b0, n};
    if (s >= {1'b0, size}) ring_next = 32'(s - {1'b0, size});
    else ring_next = s[31:0];
  endfunction

  // =============================================================================================
  // Fetch
  // =============================================================================================
  logic              pf_push, pf_pop, pf_empty, pf_full;
  logic [FifoCntW-1:0] pf_count;
  logic [128:0]      pf_wdata, pf_rdata;   // {fetch error, instr}
  logic [FCntW-1:0]  f_inflight_q;         // instructions requested, not yet in the buffer

  logic              far_valid_q;
  logic [31:0]       far_addr_q;
  logic [7:0]        far_len_q;

  logic [31:0] f_addr, f_avail, f_to4k, f_n;
  logic [31:0] f_free;
  logic        f_issue;
  logic [31:0] f_runtail;  // instructions up to tail or the ring end

  assign f_addr  = ring_base_i + {fptr_q[27:0], 4'b0000};
  assign f_runtail = (fptr_q <= ring_tail_i) ? (ring_tail_i - fptr_q) : (ring_size_i - fptr_q);
  logic [12:0] f_to4k_bytes;
  assign f_to4k_bytes = 13'h1000 - {1'b0, f_addr[11:0]};
  assign f_to4k  = {23'd0, f_to4k_bytes[12:4]};
  assign f_free  = 32'(FetchDepth) - 32'(pf_count) - 32'(f_inflight_q);
  always_comb begin
    f_avail = f_runtail;
    if (f_to4k < f_avail) f_avail = f_to4k;
    if (32'(MaxBurstInstr) < f_avail) f_avail = 32'(MaxBurstInstr);
    f_n = f_avail;
    if (f_free < f_n) f_n = f_free;
  end

  // outstanding fetch bursts (each carries at least one instruction, so FetchDepth bound them)
  logic fb_push, fb_pop, fb_empty, fb_full;
  assign f_issue = !halt && (fptr_q != ring_tail_i) && (f_n != 32'd0) && !fb_full &&
                   (!far_valid_q || f_arready_i) &&
                   ((f_n == f_avail) || (f_n >= 32'(FetchDepth / 2)));

  always_ff @(posedge clk_i) begin
    if (!rst_ni) begin
      far_valid_q <= 1'b0;
      far_addr_q  <= '0;
      far_len_q   <= '0;
      fptr_q      <= '0;
    end else begin
      if (f_arready_i) far_valid_q <= 1'b0;
      if (f_issue) begin
        far_valid_q <= 1'b1;
        far_addr_q  <= f_addr;
        far_len_q   <= 8'(f_n * BeatsPerInstr - 1);
        fptr_q      <= ring_next(fptr_q, f_n, ring_size_i);
      end
    end
  end

  assign f_arvalid_o = far_valid_q;
  assign f_araddr_o  = far_addr_q;
  assign f_arlen_o   = far_len_q;
  assign f_rready_o  = 1'b1;   // space is reserved by the credit count

  assign fb_push = f_issue;
  assign fb_pop  = f_rvalid_i && f_rlast_i;

  logic [FCntW-1:0] fb_cnt_q;
  tpu_counter #(.Width(FCntW)) u_fb_cnt (
    .clk_i, .rst_ni, .clr_i(1'b0), .incr_i(FCntW'(fb_push)), .decr_i(FCntW'(fb_pop)),
    .q_o(fb_cnt_q)
  );
  assign fb_empty = (fb_cnt_q == '0);
  assign fb_full  = (fb_cnt_q == FCntW'(FetchDepth));

  // beat assembly
  logic [127:0]  asm_q;
  logic          asm_err_q;
  logic [BpiW-1:0] asm_cnt_q;
  logic          beat_err;
  logic          asm_last;
  logic [127:0]  asm_full;
  assign beat_err = f_rresp_i[1];
  assign asm_last = (asm_cnt_q == BpiW'(BeatsPerInstr - 1));

  if (BeatsPerInstr == 1) begin : g_asm1
    assign asm_full = f_rdata_i[127:0];
    logic unused_asm;
    assign unused_asm = ^asm_q;
    if (DmaDataW > 128) begin : g_unused
      logic unused_hi;
      assign unused_hi = ^f_rdata_i[DmaDataW-1:128];
    end
  end else begin : g_asmn
    always_comb begin
      asm_full = asm_q;
      asm_full[asm_cnt_q*DmaDataW +: DmaDataW] = f_rdata_i;
    end
  end

  always_ff @(posedge clk_i) begin
    if (!rst_ni) begin
      asm_q     <= '0;
      asm_err_q <= 1'b0;
      asm_cnt_q <= '0;
    end else if (f_rvalid_i) begin
      asm_q <= asm_full;
      if (asm_last) begin
        asm_cnt_q <= '0;
        asm_err_q <= 1'b0;
      end else begin
        asm_cnt_q <= asm_cnt_q + BpiW'(1);
        asm_err_q <= asm_err_q || beat_err;
      end
    end
  end

  assign pf_push  = f_rvalid_i && asm_last;
  assign pf_wdata = {asm_err_q || beat_err, asm_full};

  logic [FCntW-1:0] f_issued;
  assign f_issued = f_issue ? FCntW'(f_n) : FCntW'(0);
  tpu_counter #(.Width(FCntW)) u_f_inflight (
    .clk_i, .rst_ni, .clr_i(1'b0), .incr_i(f_issued), .decr_i(FCntW'(pf_push)),
    .q_o(f_inflight_q)
  );

  tpu_fifo #(.Width(129), .Depth(FetchDepth)) u_prefetch (
    .clk_i, .rst_ni, .flush_i(1'b0),
    .push_i(pf_push), .wdata_i(pf_wdata), .pop_i(pf_pop), .rdata_o(pf_rdata),
    .empty_o(pf_empty), .full_o(pf_full), .count_o(pf_count)
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

  assign d_instr = pf_rdata[127:0];
  tpu_isa_pkg::fence_t d_fence;   // the same bits, seen as a FENCE
  assign d_fence = d_instr;
  assign d_ferr  = pf_rdata[128];
  assign d_pc    = ring_base_i + {head_q[27:0], 4'b0000};

  tpu_decode #(
    .ArrayN(ArrayN), .UbDepth(UbDepth), .WbDepth(WbDepth), .AccDepth(AccDepth),
    .DmaDataW(DmaDataW)
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
    unique case (d_queue)
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
  // Queues
  // =============================================================================================
  logic         lq_push, lq_pop, lq_empty, lq_full;
  logic         cq_push, cq_pop, cq_empty, cq_full;
  logic         sq_push, sq_pop, sq_empty, sq_full;
  logic [159:0] lq_rdata, sq_rdata;
  tpu_isa_pkg::instr_t cq_rdata;

  tpu_fifo #(.Width(160), .Depth(QueueDepth)) u_load_q (
    .clk_i, .rst_ni, .flush_i(1'b0),
    .push_i(lq_push), .wdata_i({d_pc, d_instr}), .pop_i(lq_pop), .rdata_o(lq_rdata),
    .empty_o(lq_empty), .full_o(lq_full), .count_o()
  );
  tpu_fifo #(.Width(128), .Depth(QueueDepth)) u_compute_q (
    .clk_i, .rst_ni, .flush_i(1'b0),
    .push_i(cq_push), .wdata_i(d_instr), .pop_i(cq_pop), .rdata_o(cq_rdata),
    .empty_o(cq_empty), .full_o(cq_full), .count_o()
  );
  tpu_fifo #(.Width(160), .Depth(QueueDepth)) u_store_q (
    .clk_i, .rst_ni, .flush_i(1'b0),
    .push_i(sq_push), .wdata_i({d_pc, d_instr}), .pop_i(sq_pop), .rdata_o(sq_rdata),
    .empty_o(sq_empty), .full_o(sq_full), .count_o()
  );

  // =============================================================================================
  // Dispatch
  // =============================================================================================
  logic fence_active_q;
  logic d_valid, d_take, d_fault_take, d_fence_take;
  logic q_full;

  assign d_valid = !pf_empty && !halt && !fence_active_q;
  always_comb begin
    unique case (d_queue)
      2'(tpu_isa_pkg::QueueLoad):    q_full = lq_full;
      2'(tpu_isa_pkg::QueueCompute): q_full = cq_full;
      2'(tpu_isa_pkg::QueueStore):   q_full = sq_full;
      default:                       q_full = 1'b0;
    endcase
  end

  assign d_fault_take = d_valid && (d_ferr || d_fault || d_tok_fault);
  assign d_fence_take = d_valid && !d_fault_take && (d_queue == 2'(tpu_isa_pkg::QueueCtrl));
  assign d_take       = d_valid && !d_fault_take && !q_full;   // includes FENCE

  assign lq_push  = d_take && (d_queue == 2'(tpu_isa_pkg::QueueLoad));
  assign cq_push  = d_take && (d_queue == 2'(tpu_isa_pkg::QueueCompute));
  assign sq_push  = d_take && (d_queue == 2'(tpu_isa_pkg::QueueStore));
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
  // Tokens and issue
  // =============================================================================================
  logic [7:0] ld2cmp_q, cmp2ld_q, cmp2st_q, st2cmp_q;

  // in-flight push flags per engine: {push_prev, push_next}
  logic       li_push, li_pop, li_empty, li_full;
  logic       ci_push, ci_pop, ci_empty, ci_full;
  logic       si_push, si_pop, si_empty, si_full;
  logic [1:0] li_rdata, ci_rdata, si_rdata;

  tpu_isa_pkg::instr_t lq_instr, sq_instr;
  assign lq_instr = lq_rdata[127:0];
  assign sq_instr = sq_rdata[127:0];

  logic ld_tok_ok, cmp_tok_ok, st_tok_ok;
  assign ld_tok_ok  = !lq_instr.hdr.pop_next || (cmp2ld_q != 8'd0);
  assign cmp_tok_ok = (!cq_rdata.hdr.pop_prev || (ld2cmp_q != 8'd0)) &&
                      (!cq_rdata.hdr.pop_next || (st2cmp_q != 8'd0));
  assign st_tok_ok  = !sq_instr.hdr.pop_prev || (cmp2st_q != 8'd0);

  assign ld_valid_o  = !lq_empty && ld_tok_ok && !li_full;
  assign cmp_valid_o = !cq_empty && cmp_tok_ok && !ci_full;
  assign st_valid_o  = !sq_empty && st_tok_ok && !si_full;
  assign ld_instr_o  = lq_instr;
  assign ld_pc_o     = lq_rdata[159:128];
  assign cmp_instr_o = cq_rdata;
  assign st_instr_o  = sq_instr;
  assign st_pc_o     = sq_rdata[159:128];

  logic ld_fire, cmp_fire, st_fire;
  assign ld_fire  = ld_valid_o && ld_ready_i;
  assign cmp_fire = cmp_valid_o && cmp_ready_i;
  assign st_fire  = st_valid_o && st_ready_i;
  assign lq_pop = ld_fire;
  assign cq_pop = cmp_fire;
  assign sq_pop = st_fire;

  assign li_push = ld_fire;
  assign ci_push = cmp_fire;
  assign si_push = st_fire;
  assign li_pop  = ld_done_i;
  assign ci_pop  = cmp_done_i;
  assign si_pop  = st_done_i;

  tpu_fifo #(.Width(2), .Depth(InflightDepth)) u_ld_inflight (
    .clk_i, .rst_ni, .flush_i(1'b0),
    .push_i(li_push), .wdata_i({lq_instr.hdr.push_prev, lq_instr.hdr.push_next}), .pop_i(li_pop),
    .rdata_o(li_rdata), .empty_o(li_empty), .full_o(li_full), .count_o()
  );
  tpu_fifo #(.Width(2), .Depth(InflightDepth)) u_cmp_inflight (
    .clk_i, .rst_ni, .flush_i(1'b0),
    .push_i(ci_push), .wdata_i({cq_rdata.hdr.push_prev, cq_rdata.hdr.push_next}), .pop_i(ci_pop),
    .rdata_o(ci_rdata), .empty_o(ci_empty), .full_o(ci_full), .count_o()
  );
  tpu_fifo #(.Width(2), .Depth(InflightDepth)) u_st_inflight (
    .clk_i, .rst_ni, .flush_i(1'b0),
    .push_i(si_push), .wdata_i({sq_instr.hdr.push_prev, sq_instr.hdr.push_next}), .pop_i(si_pop),
    .rdata_o(si_rdata), .empty_o(si_empty), .full_o(si_full), .count_o()
  );

  logic ld2cmp_inc, ld2cmp_dec, cmp2ld_inc, cmp2ld_dec;
  logic cmp2st_inc, cmp2st_dec, st2cmp_inc, st2cmp_dec;
  assign ld2cmp_inc = ld_done_i && li_rdata[0];        // LOAD push_next
  assign cmp2ld_inc = cmp_done_i && ci_rdata[1];       // COMPUTE push_prev
  assign cmp2st_inc = cmp_done_i && ci_rdata[0];       // COMPUTE push_next
  assign st2cmp_inc = st_done_i && si_rdata[1];        // STORE push_prev
  assign cmp2ld_dec = ld_fire && lq_instr.hdr.pop_next;
  assign ld2cmp_dec = cmp_fire && cq_rdata.hdr.pop_prev;
  assign st2cmp_dec = cmp_fire && cq_rdata.hdr.pop_next;
  assign cmp2st_dec = st_fire && sq_instr.hdr.pop_prev;

  tpu_counter #(.Width(8)) u_ld2cmp (
    .clk_i, .rst_ni, .clr_i(1'b0), .incr_i(8'(ld2cmp_inc)), .decr_i(8'(ld2cmp_dec)), .q_o(ld2cmp_q)
  );
  tpu_counter #(.Width(8)) u_cmp2ld (
    .clk_i, .rst_ni, .clr_i(1'b0), .incr_i(8'(cmp2ld_inc)), .decr_i(8'(cmp2ld_dec)), .q_o(cmp2ld_q)
  );
  tpu_counter #(.Width(8)) u_cmp2st (
    .clk_i, .rst_ni, .clr_i(1'b0), .incr_i(8'(cmp2st_inc)), .decr_i(8'(cmp2st_dec)), .q_o(cmp2st_q)
  );
  tpu_counter #(.Width(8)) u_st2cmp (
    .clk_i, .rst_ni, .clr_i(1'b0), .incr_i(8'(st2cmp_inc)), .decr_i(8'(st2cmp_dec)), .q_o(st2cmp_q)
  );

  logic engines_idle;
  assign engines_idle = lq_empty && cq_empty && sq_empty && li_empty && ci_empty && si_empty &&
                        ld_idle_i && cmp_idle_i && st_idle_i;

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
  assign perf_dma_wait_o = !cq_empty && cq_rdata.hdr.pop_prev && (ld2cmp_q == 8'd0);
  assign perf_instret_inc_o = 3'(ld_done_i) + 3'(cmp_done_i) + 3'(st_done_i) + 3'(fence_ok);

  // Deliberately unused: LOAD has no push_prev, STORE no push_next (rejected at decode);
  // OKAY vs EXOKAY is not distinguished.
  logic unused_bits;
  // A fetch error reports the failing instruction's own address (docs/perf_model.md, AXI_ERROR
  // rule), so the burst address need not travel with the instruction.
  assign unused_bits = ^{li_rdata[1], si_rdata[0], f_rresp_i[0], fw_bresp_i[0], f_to4k_bytes[3:0],
                         d_fence.rsvd96, d_fence.rsvd13, d_fence.hdr};

  // =============================================================================================
  // Assertions
  // =============================================================================================
  `TPU_ASSERT(FetchArStable_A, f_arvalid_o && !f_arready_i |=> f_arvalid_o && $stable(f_araddr_o)
              && $stable(f_arlen_o), clk_i, !rst_ni)
  `TPU_ASSERT(FenceAwStable_A, fw_awvalid_o && !fw_awready_i |=> fw_awvalid_o &&
              $stable(fw_awaddr_o), clk_i, !rst_ni)
  `TPU_ASSERT(FenceWStable_A, fw_wvalid_o && !fw_wready_i |=> fw_wvalid_o && $stable(fw_wdata_o)
              && $stable(fw_wstrb_o), clk_i, !rst_ni)
  `TPU_ASSERT_NEVER(FetchRNoBurst_A, f_rvalid_i && fb_empty, clk_i, !rst_ni)
  `TPU_ASSERT_NEVER(PrefetchOverflow_A, pf_push && pf_full, clk_i, !rst_ni)
  `TPU_ASSERT_NEVER(FenceBUnexpected_A, fw_bvalid_i && !fw_wait_b_q, clk_i, !rst_ni)
  `TPU_ASSERT_NEVER(LdDoneUnexpected_A, ld_done_i && li_empty, clk_i, !rst_ni)
  `TPU_ASSERT_NEVER(CmpDoneUnexpected_A, cmp_done_i && ci_empty, clk_i, !rst_ni)
  `TPU_ASSERT_NEVER(StDoneUnexpected_A, st_done_i && si_empty, clk_i, !rst_ni)
  `TPU_ASSERT_NEVER(Ld2CmpUnderflow_A, ld2cmp_dec && !ld2cmp_inc && ld2cmp_q == 8'd0, clk_i, !rst_ni)
  `TPU_ASSERT_NEVER(Cmp2LdUnderflow_A, cmp2ld_dec && !cmp2ld_inc && cmp2ld_q == 8'd0, clk_i, !rst_ni)
  `TPU_ASSERT_NEVER(Cmp2StUnderflow_A, cmp2st_dec && !cmp2st_inc && cmp2st_q == 8'd0, clk_i, !rst_ni)
  `TPU_ASSERT_NEVER(St2CmpUnderflow_A, st2cmp_dec && !st2cmp_inc && st2cmp_q == 8'd0, clk_i, !rst_ni)
  `TPU_ASSERT_NEVER(Ld2CmpOverflow_A, ld2cmp_inc && !ld2cmp_dec && ld2cmp_q == 8'hFF, clk_i, !rst_ni)
  `TPU_ASSERT_NEVER(Cmp2LdOverflow_A, cmp2ld_inc && !cmp2ld_dec && cmp2ld_q == 8'hFF, clk_i, !rst_ni)
  `TPU_ASSERT_NEVER(Cmp2StOverflow_A, cmp2st_inc && !cmp2st_dec && cmp2st_q == 8'hFF, clk_i, !rst_ni)
  `TPU_ASSERT_NEVER(St2CmpOverflow_A, st2cmp_inc && !st2cmp_dec && st2cmp_q == 8'hFF, clk_i, !rst_ni)
  `TPU_ASSERT_NEVER(FaultStates_A, fault_pend_q && faulted_q, clk_i, !rst_ni)
  `TPU_ASSERT_INIT(FetchWidth_A, DmaDataW >= 32 && DmaDataW <= 128)
  `TPU_ASSERT_INIT(FetchDepthPow_A, FetchDepth >= 2 && FetchDepth <= 64)
  // live token counters (8 bits) hold at most TOKEN_MAX + QueueDepth; the balance fits TokBalW
  `TPU_ASSERT_INIT(TokenRange_A, tpu_isa_pkg::TOKEN_MAX + QueueDepth <= 255 && QueueDepth < 256)

endmodule
