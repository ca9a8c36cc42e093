// Dispatch side of the command processor: the LOAD / COMPUTE / STORE instruction queues, the
// VTA-style dependency-token counters and the issue of each queue head to its engine.
//
// A decoded instruction enters its queue with push_i (full_o says whether that queue has room).
// A queue head is offered to its engine in the same cycle the tokens it pops are available and
// its engine has an in-flight slot; the pops are taken at issue. When the engine reports done,
// the instruction's push flags (kept per engine in in-flight FIFOs, in acceptance order) add a
// token, visible one cycle later. idle_o: every queue empty and every engine idle.
`include "tpu_assert.svh"

module tpu_cmd_dispatch #(
  parameter int unsigned QueueDepth    = 8,
  parameter int unsigned InflightDepth = 8
) (
  input  logic                clk_i,
  input  logic                rst_ni,

  // from decode
  input  logic                push_i,        // enqueue instr_i into queue_i
  input  logic [1:0]          queue_i,       // tpu_isa_pkg::queue_e (never QueueCtrl with push_i)
  input  tpu_isa_pkg::instr_t instr_i,
  input  logic [31:0]         pc_i,
  output logic                full_o,        // queue_i has no room

  // LOAD engine
  output logic                ld_valid_o,
  input  logic                ld_ready_i,
  output tpu_isa_pkg::load_t  ld_instr_o,
  output logic [31:0]         ld_pc_o,
  input  logic                ld_done_i,
  input  logic                ld_idle_i,

  // COMPUTE engine
  output logic                cmp_valid_o,
  input  logic                cmp_ready_i,
  output tpu_isa_pkg::instr_t cmp_instr_o,
  input  logic                cmp_done_i,
  input  logic                cmp_idle_i,

  // STORE engine
  output logic                st_valid_o,
  input  logic                st_ready_i,
  output tpu_isa_pkg::store_t st_instr_o,
  output logic [31:0]         st_pc_o,
  input  logic                st_done_i,
  input  logic                st_idle_i,

  output logic                idle_o,          // all queues empty, all engines idle
  output logic                perf_dma_wait_o  // the compute head waits for a LOAD token
);

  // ---------------------------------------------------------------------------------------------
  // Queues
  // ---------------------------------------------------------------------------------------------
  logic         lq_push, lq_pop, lq_empty, lq_full;
  logic         cq_push, cq_pop, cq_empty, cq_full;
  logic         sq_push, sq_pop, sq_empty, sq_full;
  logic [159:0] lq_rdata, sq_rdata;
  tpu_isa_pkg::instr_t cq_rdata;

  tpu_fifo #(.Width(160), .Depth(QueueDepth)) u_load_q (
    .clk_i, .rst_ni, .flush_i(1'b0),
    .push_i(lq_push), .wdata_i({pc_i, instr_i}), .pop_i(lq_pop), .rdata_o(lq_rdata),
    .empty_o(lq_empty), .full_o(lq_full), .count_o()
  );
  tpu_fifo #(.Width(128), .Depth(QueueDepth)) u_compute_q (
    .clk_i, .rst_ni, .flush_i(1'b0),
    .push_i(cq_push), .wdata_i(instr_i), .pop_i(cq_pop), .rdata_o(cq_rdata),
    .empty_o(cq_empty), .full_o(cq_full), .count_o()
  );
  tpu_fifo #(.Width(160), .Depth(QueueDepth)) u_store_q (
    .clk_i, .rst_ni, .flush_i(1'b0),
    .push_i(sq_push), .wdata_i({pc_i, instr_i}), .pop_i(sq_pop), .rdata_o(sq_rdata),
    .empty_o(sq_empty), .full_o(sq_full), .count_o()
  );

  assign lq_push = push_i && (queue_i == 2'(tpu_isa_pkg::QueueLoad));
  assign cq_push = push_i && (queue_i == 2'(tpu_isa_pkg::QueueCompute));
  assign sq_push = push_i && (queue_i == 2'(tpu_isa_pkg::QueueStore));
  always_comb begin
    unique case (queue_i)
      2'(tpu_isa_pkg::QueueLoad):    full_o = lq_full;
      2'(tpu_isa_pkg::QueueCompute): full_o = cq_full;
      2'(tpu_isa_pkg::QueueStore):   full_o = sq_full;
      default:                       full_o = 1'b0;
    endcase
  end

  // ---------------------------------------------------------------------------------------------
  // Tokens and issue
  // ---------------------------------------------------------------------------------------------
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

  assign idle_o = lq_empty && cq_empty && sq_empty && li_empty && ci_empty && si_empty &&
                        ld_idle_i && cmp_idle_i && st_idle_i;

  assign perf_dma_wait_o = !cq_empty && cq_rdata.hdr.pop_prev && (ld2cmp_q == 8'd0);

  // Deliberately unused: LOAD has no push_prev, STORE no push_next (rejected at decode).
  logic unused_d;
  assign unused_d = ^{li_rdata[1], si_rdata[0]};

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

endmodule
