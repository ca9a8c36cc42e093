// fp32 adder of the device's numerics contract (docs/numerics.md, rules 1-6), combinational:
//   sum_o = a_i + b_i
// - flush to zero on input: a subnormal operand reads as a zero of its sign;
// - one rounding, to nearest, ties to even, of the exact sum;
// - flush to zero on output, decided on the exact sum: a result below 2^-126 in magnitude is a
//   zero of the exact sum's sign (a sum of two normals that small is exact, so nothing is lost);
// - IEEE zeros: x + (-x) = +0, (-0) + (-0) = -0, (+0) + (-0) = +0;
// - NaN in or inf - inf gives the canonical NaN 0x7FC00000; inf + finite = that inf;
// - a rounded magnitude of 2^128 or more is an infinity of the sum's sign.
// A subtraction is this adder with b's sign flipped by the caller. The arithmetic is
// tpu_fp_pkg::fp32_add (shared with datapaths that call it procedurally).
module tpu_fp32_add (
  input  logic [31:0] a_i,
  input  logic [31:0] b_i,
  output logic [31:0] sum_o
);

  assign sum_o = tpu_fp_pkg::fp32_add(a_i, b_i);

endmodule
