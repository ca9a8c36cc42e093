// fp32 x fp32 multiplier (combinational): tpu_fp32_mul_f of tpu_fp32.svh, the rules of
// docs/numerics.md (flush-to-zero on input, RNE, flush before rounding: an exact product below
// 2^-126 is a signed zero even if it would round up to the smallest normal; overflow to inf;
// canonical NaN). The C++ twin is tpuw::num::mul (host/include/tpuw/numerics.h).
module tpu_fp32_mul (
  input  logic [31:0] a_i,
  input  logic [31:0] b_i,
  output logic [31:0] prod_o
);
  `include "tpu_fp32.svh"

  assign prod_o = tpu_fp32_mul_f(a_i, b_i);

endmodule
