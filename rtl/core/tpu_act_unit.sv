// Activation unit: requantizes one ACC row (ArrayN int32) into one UB row (ArrayN int8).
// For each column j (docs/isa.md, ACTIVATE):
//   x = acc[j] + bias[j]                       (32-bit wrap; bias_i is zero when bias is off)
//   p = int64(x) * int64(mult[j])
//   if shift[j] > 0: p = (p + 2^(shift[j]-1)) >>> shift[j]   (round half up, arithmetic)
//   if relu: p = max(p, 0)
//   out[j] = saturate(p, -128, 127)
//   if lut: out[j] = table[out[j] + 128]       (ISA 1.2, EnableLut; lut_table_i byte e = entry e)
// The rounding shift is computed as ((p >>> (s-1)) + 1) >>> 1, which equals
// floor((p + 2^(s-1)) / 2^s) exactly and never overflows 64 bits (|p| <= 2^62).
//
// ActLanes = L lanes (a power of two dividing ArrayN) do the arithmetic; a row is P = ArrayN/L
// column groups of L columns (group g = columns g*L .. g*L+L-1), one group per cycle. Two pipeline
// stages per group: the product is registered, then the rounded, saturated result.
//   L == ArrayN (P = 1): a row is accepted every cycle (in_ready_o is constant 1) and comes out
//     2 cycles later: in_valid_i at t -> out_valid_o at t+2.
//   L <  ArrayN (P > 1): the row accepted at t (in_valid_i && in_ready_o) feeds group 0 straight
//     from in_acc_i at t; the rest of the row and its tag are captured and groups 1..P-1 enter
//     stage 1 at t+1..t+P-1. in_ready_o is low during t+1..t+P-1, so rows are accepted at most
//     every P cycles (a row offered while in_ready_o is low is not taken: the source holds it or,
//     like tpu_compute, paces itself so that never happens). Stage 2 shifts each group's L
//     results into the output row from the top, so after group P-1 the row is in column order:
//     out_valid_o at t+P+1, for one cycle, with the full row and its tag. Back-to-back rows
//     (every P cycles) do not disturb the presented row: the next row's group 0 reaches the
//     output register one cycle after out_valid_o.
// busy_o is high from the cycle after acceptance through out_valid_o (both cases).
// Results are bit-identical for every L: the lanes compute the same formula, only the operand
// selection and the output assembly are time-shared.
// bias_i, mult_i, shift_i, relu_i, lut_en_i and lut_table_i must stay stable while rows are in
// flight (busy_o). The table lookup is a 256:1 byte mux per lane after the saturation, in the same
// stage (no extra cycle): L lookups, so time-shared lanes share the muxes too.
`include "tpu_assert.svh"

module tpu_act_unit #(
  parameter int unsigned ArrayN   = 16,
  parameter int unsigned ActLanes = ArrayN,
  parameter int unsigned TagW     = 1,
  parameter bit          EnableLut = 1'b1
) (
  input  logic                  clk_i,
  input  logic                  rst_ni,
  input  logic                  in_valid_i,
  output logic                  in_ready_o,
  input  logic [32*ArrayN-1:0]  in_acc_i,
  input  logic [TagW-1:0]       in_tag_i,
  input  logic [32*ArrayN-1:0]  bias_i,
  input  logic [32*ArrayN-1:0]  mult_i,
  input  logic [6*ArrayN-1:0]   shift_i,
  input  logic                  relu_i,
  input  logic                  lut_en_i,
  input  logic [2047:0]         lut_table_i,
  output logic                  out_valid_o,
  output logic [8*ArrayN-1:0]   out_data_o,
  output logic [TagW-1:0]       out_tag_o,
  output logic                  busy_o
);

  localparam int unsigned N = ArrayN;
  localparam int unsigned L = ActLanes;
  localparam int unsigned P = ArrayN / ActLanes;  // cycles (column groups) per row

  // Stage 0: the group entering stage 1 this cycle (operands selected by the generate below).
  logic                s0_valid;
  logic [TagW-1:0]     s0_tag;
  logic [32*L-1:0]     s0_acc, s0_bias, s0_mult;
  logic                run;        // groups 1..P-1 of an accepted row still to enter stage 1

  // Stage 1: bias add and 64-bit product of one group.
  logic                valid1_q;
  logic [TagW-1:0]     tag1_q;
  logic [64*L-1:0]     prod1_q;
  logic [6*L-1:0]      s1_shift;   // shift amounts of the group in stage 1
  logic                s1_last;    // the group in stage 1 completes its row
  logic [8*L-1:0]      s1_res;     // its rounded, saturated results

  // Stage 2: the assembled row.
  logic                valid2_q;
  logic [TagW-1:0]     tag2_q;
  logic [8*N-1:0]      res2_q;

  always_ff @(posedge clk_i) begin
    if (!rst_ni) begin
      valid1_q <= 1'b0;
      valid2_q <= 1'b0;
    end else begin
      valid1_q <= s0_valid;
      valid2_q <= valid1_q && s1_last;
    end
  end

  // The arithmetic sits behind the valid enables: idle cycles cost the simulator nothing.
  always_ff @(posedge clk_i) begin
    if (s0_valid) begin
      tag1_q <= s0_tag;
      for (int unsigned j = 0; j < L; j++) begin
        logic [31:0]        x;
        logic signed [63:0] p;
        x = s0_acc[32*j +: 32] + s0_bias[32*j +: 32];
        // Signed multiply in a 64-bit context (both operands sign-extended).
        p = $signed(x) * $signed(s0_mult[32*j +: 32]);
        prod1_q[64*j +: 64] <= p;
      end
    end
  end

  always_comb begin
    for (int unsigned j = 0; j < L; j++) begin
      logic signed [63:0] p;
      logic signed [63:0] t;
      logic        [5:0]  s;
      logic        [7:0]  r;
      p = $signed(prod1_q[64*j +: 64]);
      t = p;
      s = s1_shift[6*j +: 6];
      if (s != 6'd0) begin
        t = p >>> (s - 6'd1);
        p = (t + 64'sd1) >>> 1;
      end
      if (relu_i && p < 64'sd0) p = 64'sd0;
      if (p > 64'sd127)       r = 8'h7f;
      else if (p < -64'sd128) r = 8'h80;
      else                    r = p[7:0];
      // Table entry r + 128: the int8 bits with the sign bit flipped.
      if (EnableLut && lut_en_i) r = lut_table_i[{~r[7], r[6:0], 3'b000} +: 8];
      s1_res[8*j +: 8] = r;
    end
  end

  if (!EnableLut) begin : g_no_lut
    logic unused_lut;
    assign unused_lut = ^{lut_en_i, lut_table_i};
  end

  always_ff @(posedge clk_i) begin
    if (valid1_q && s1_last) tag2_q <= tag1_q;
  end

  if (P == 1) begin : g_full
    // Every column has its own lane: the row goes straight through, one per cycle.
    assign in_ready_o = 1'b1;
    assign run        = 1'b0;
    assign s0_valid   = in_valid_i;
    assign s0_tag     = in_tag_i;
    assign s0_acc     = in_acc_i;
    assign s0_bias    = bias_i;
    assign s0_mult    = mult_i;
    assign s1_shift   = shift_i;
    assign s1_last    = 1'b1;

    always_ff @(posedge clk_i) begin
      if (valid1_q) res2_q <= s1_res;
    end
  end else begin : g_shared
    localparam int unsigned GrpW = $clog2(P);
    localparam logic [GrpW-1:0] LastGrp = GrpW'(P - 1);

    logic                run_q;     // groups 1..P-1 of the captured row are entering stage 1
    logic [GrpW-1:0]     grp_q;     // the group entering stage 1 this cycle (0 on acceptance)
    logic [32*(N-L)-1:0] rest_q;    // the captured row's groups not yet issued, next one lowest
    logic [TagW-1:0]     tag_q;
    logic [GrpW-1:0]     grp1_q;    // the group in stage 1
    logic                accept;

    assign in_ready_o = !run_q;
    assign accept     = in_valid_i && !run_q;
    assign run        = run_q;
    assign s0_valid   = accept || run_q;
    assign s0_tag     = run_q ? tag_q : in_tag_i;
    // Group 0 comes straight from the input (no capture latency); the others from rest_q.
    assign s0_acc     = run_q ? rest_q[0 +: 32*L] : in_acc_i[0 +: 32*L];
    assign s0_bias    = bias_i[32*L*grp_q +: 32*L];
    assign s0_mult    = mult_i[32*L*grp_q +: 32*L];
    assign s1_shift   = shift_i[6*L*grp1_q +: 6*L];
    assign s1_last    = (grp1_q == LastGrp);

    always_ff @(posedge clk_i) begin
      if (!rst_ni) begin
        run_q <= 1'b0;
        grp_q <= '0;
      end else if (accept) begin
        run_q <= 1'b1;
        grp_q <= GrpW'(1);
      end else if (run_q) begin
        grp_q <= grp_q + 1'b1;  // wraps to 0 after the last group (P is a power of two)
        if (grp_q == LastGrp) run_q <= 1'b0;
      end
    end

    // rest_q shifts down one group per cycle so the next group is always in its low bits: a
    // 2:1 mux per bit instead of a P:1 mux per lane input.
    always_ff @(posedge clk_i) begin
      if (accept) begin
        rest_q <= in_acc_i[32*N-1:32*L];
        tag_q  <= in_tag_i;
      end else if (run_q) begin
        rest_q <= rest_q >> (32*L);
      end
      if (s0_valid) grp1_q <= grp_q;
    end

    // Groups reach stage 2 in order 0..P-1 on consecutive cycles: shifting each one in from the
    // top leaves group g at columns g*L.. after the last one (no per-group write decode).
    always_ff @(posedge clk_i) begin
      if (valid1_q) res2_q <= {s1_res, res2_q[8*N-1:8*L]};
    end

    // A row is accepted only at group 0: the operands of group 0 come from grp_q == 0.
    `TPU_ASSERT_NEVER(GroupIdleNonZero_A, !run_q && grp_q != '0, clk_i, !rst_ni)
  end

  assign out_valid_o = valid2_q;
  assign out_data_o  = res2_q;
  assign out_tag_o   = tag2_q;
  assign busy_o      = run || valid1_q || valid2_q;

  `TPU_ASSERT_INIT(ActLanesRange_A, ActLanes >= 1 && ActLanes <= ArrayN)
  `TPU_ASSERT_INIT(ActLanesPow2_A, (ActLanes & (ActLanes - 1)) == 0)
  `TPU_ASSERT_INIT(ActLanesDivide_A, ArrayN % ActLanes == 0)

endmodule
