// bf16 x bf16 multiplier of the device's numerics contract (docs/numerics.md), combinational:
//   prod_o = a_i * b_i, as an fp32 bit pattern.
// The product of two 8-bit significands has at most 16 significant bits, so it is exact in fp32;
// there is no rounding. Flush to zero on input (a subnormal operand is a zero of its sign); an
// exact product below 2^-126 in magnitude is a zero of the xor of the signs, one of 2^128 or more
// an infinity; inf * 0 and any NaN operand give the canonical NaN 0x7FC00000; inf * x = +-inf.
// The arithmetic is tpu_fp_pkg::bf16_mul.
module tpu_bf16_mul (
  input  logic [15:0] a_i,
  input  logic [15:0] b_i,
  output logic [31:0] prod_o
);

  assign prod_o = tpu_fp_pkg::bf16_mul(a_i, b_i);

endmodule
