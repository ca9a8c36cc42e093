// fp32 -> bf16 conversion of the device's numerics contract (docs/numerics.md, rule 7),
// combinational: NaN -> 0x7FC0; a subnormal input flushes to a zero of its sign; otherwise the
// 32-bit pattern rounds to its upper half to nearest, ties to even
// ((bits + 0x7FFF + bit16) >> 16), so a finite value that rounds past the largest bf16 becomes
// an infinity and infinities stay infinities. The result is never subnormal.
module tpu_fp32_to_bf16 (
  input  logic [31:0] a_i,
  output logic [15:0] bf16_o
);

  logic [31:0] rounded;
  assign rounded = a_i + 32'h0000_7FFF + {31'd0, a_i[16]};

  always_comb begin
    if ((a_i[30:23] == 8'hFF) && (a_i[22:0] != 23'd0)) begin
      bf16_o = 16'h7FC0;
    end else if (a_i[30:23] == 8'd0) begin
      bf16_o = {a_i[31], 15'd0};
    end else begin
      bf16_o = rounded[31:16];
    end
  end

  logic unused_rounded;
  assign unused_rounded = ^rounded[15:0];

endmodule
