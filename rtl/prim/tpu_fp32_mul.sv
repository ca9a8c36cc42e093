// fp32 x fp32 multiplier of the device's numerics contract (docs/numerics.md), combinational:
//   prod_o = a_i * b_i
// Flush-to-zero on input, one rounding to nearest even, flush before rounding (an exact product
// below 2^-126 is a signed zero even if it would round up to the smallest normal), overflow to
// inf, canonical NaN. The arithmetic is tpu_fp_pkg::fp32_mul (the vector unit's multiplier); the
// C++ twin is tpuw::num::mul (host/include/tpuw/numerics.h).
module tpu_fp32_mul (
  input  logic [31:0] a_i,
  input  logic [31:0] b_i,
  output logic [31:0] prod_o
);

  assign prod_o = tpu_fp_pkg::fp32_mul(a_i, b_i);

endmodule
