// Test wrapper: the fp32 functions of rtl/include/tpu_fp32.svh as combinational outputs.
module tpu_fp32_tb (
  input  logic [31:0] a_i,
  input  logic [31:0] b_i,
  output logic [31:0] mul_o,
  output logic [31:0] add_o,
  output logic [31:0] round_o
);
  `include "tpu_fp32.svh"

  assign mul_o   = tpu_fp32_mul_f(a_i, b_i);
  assign add_o   = tpu_fp32_add_f(a_i, b_i);
  assign round_o = tpu_fp32_round_bf16_f(a_i);

endmodule
