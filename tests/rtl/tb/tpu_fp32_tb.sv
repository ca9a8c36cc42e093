// Test wrapper: the vector unit's fp32 functions of rtl/pkg/tpu_fp_pkg.sv as combinational
// outputs (the add and the fp32 -> bf16 -> fp32 rounding of VECTOR's VRound).
module tpu_fp32_tb (
  input  logic [31:0] a_i,
  input  logic [31:0] b_i,
  output logic [31:0] mul_o,
  output logic [31:0] add_o,
  output logic [31:0] round_o
);

  assign mul_o   = tpu_fp_pkg::fp32_mul(a_i, b_i);
  assign add_o   = tpu_fp_pkg::fp32_add(a_i, b_i);
  assign round_o = {tpu_fp_pkg::fp32_to_bf16(a_i), 16'd0};

endmodule
