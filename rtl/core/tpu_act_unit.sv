// Activation unit: requantizes one ACC row (ArrayN int32) per cycle into one UB row (ArrayN int8).
// For each column j (docs/isa.md, ACTIVATE):
//   x = acc[j] + bias[j]                       (32-bit wrap; bias_i is zero when bias is off)
//   p = int64(x) * int64(mult[j])
//   if shift[j] > 0: p = (p + 2^(shift[j]-1)) >>> shift[j]   (round half up, arithmetic)
//   if relu: p = max(p, 0)
//   out[j] = saturate(p, -128, 127)
// The rounding shift is computed as ((p >>> (s-1)) + 1) >>> 1, which equals
// floor((p + 2^(s-1)) / 2^s) exactly and never overflows 64 bits (|p| <= 2^62).
// Two pipeline stages: the product is registered, then the rounded, saturated result.
// bias_i, mult_i, shift_i and relu_i must stay stable while rows are in flight (busy_o).
`include "tpu_assert.svh"

module tpu_act_unit #(
  parameter int unsigned ArrayN   = 16,
  parameter int unsigned ActLanes = ArrayN,
  parameter int unsigned TagW     = 1
) (
  input  logic                  clk_i,
  input  logic                  rst_ni,
  input  logic                  in_valid_i,
  input  logic [32*ArrayN-1:0]  in_acc_i,
  input  logic [TagW-1:0]       in_tag_i,
  input  logic [32*ArrayN-1:0]  bias_i,
  input  logic [32*ArrayN-1:0]  mult_i,
  input  logic [6*ArrayN-1:0]   shift_i,
  input  logic                  relu_i,
  output logic                  out_valid_o,
  output logic [8*ArrayN-1:0]   out_data_o,
  output logic [TagW-1:0]       out_tag_o,
  output logic                  busy_o
);

  localparam int unsigned N = ArrayN;

  // Stage 1: bias add and 64-bit product.
  logic                valid1_q;
  logic [TagW-1:0]     tag1_q;
  logic [64*N-1:0]     prod1_q;

  // Stage 2: rounding shift, ReLU, saturation.
  logic                valid2_q;
  logic [TagW-1:0]     tag2_q;
  logic [8*N-1:0]      res2_q;

  always_ff @(posedge clk_i) begin
    if (!rst_ni) begin
      valid1_q <= 1'b0;
      valid2_q <= 1'b0;
    end else begin
      valid1_q <= in_valid_i;
      valid2_q <= valid1_q;
    end
  end

  // The arithmetic sits behind the valid enables: idle cycles cost the simulator nothing.
  always_ff @(posedge clk_i) begin
    if (in_valid_i) begin
      tag1_q <= in_tag_i;
      for (int unsigned j = 0; j < N; j++) begin
        logic [31:0]        x;
        logic signed [63:0] p;
        x = in_acc_i[32*j +: 32] + bias_i[32*j +: 32];
        // Signed multiply in a 64-bit context (both operands sign-extended).
        p = $signed(x) * $signed(mult_i[32*j +: 32]);
        prod1_q[64*j +: 64] <= p;
      end
    end
  end

  always_ff @(posedge clk_i) begin
    if (valid1_q) begin
      tag2_q <= tag1_q;
      for (int unsigned j = 0; j < N; j++) begin
        logic signed [63:0] p;
        logic signed [63:0] t;
        logic        [5:0]  s;
        p = $signed(prod1_q[64*j +: 64]);
        s = shift_i[6*j +: 6];
        if (s != 6'd0) begin
          t = p >>> (s - 6'd1);
          p = (t + 64'sd1) >>> 1;
        end
        if (relu_i && p < 64'sd0) p = 64'sd0;
        if (p > 64'sd127)       res2_q[8*j +: 8] <= 8'h7f;
        else if (p < -64'sd128) res2_q[8*j +: 8] <= 8'h80;
        else                    res2_q[8*j +: 8] <= p[7:0];
      end
    end
  end

  assign out_valid_o = valid2_q;
  assign out_data_o  = res2_q;
  assign out_tag_o   = tag2_q;
  assign busy_o      = valid1_q | valid2_q;

  `TPU_ASSERT_INIT(ActLanesFull_A, ActLanes == ArrayN)  // time-shared lanes: not yet

endmodule
