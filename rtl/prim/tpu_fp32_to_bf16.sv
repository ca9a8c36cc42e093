// fp32 -> bf16 conversion of the device's numerics contract (docs/numerics.md, rule 7),
// combinational: NaN -> 0x7FC0; a subnormal input flushes to a zero of its sign; otherwise the
// 32-bit pattern rounds to its upper half to nearest, ties to even
// ((bits + 0x7FFF + bit16) >> 16), so a finite value that rounds past the largest bf16 becomes
// an infinity and infinities stay infinities. The result is never subnormal.
// The arithmetic is tpu_fp_pkg::fp32_to_bf16.
module tpu_fp32_to_bf16 (
  input  logic [31:0] a_i,
  output logic [15:0] bf16_o
);

  assign bf16_o = tpu_fp_pkg::fp32_to_bf16(a_i);

endmodule
