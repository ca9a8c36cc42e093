// bf16 x bf16 multiplier of the device's numerics contract (docs/numerics.md), combinational:
//   prod_o = a_i * b_i, as an fp32 bit pattern.
// The product of two 8-bit significands has at most 16 significant bits, so it is exact in fp32;
// there is no rounding. Flush to zero on input (a subnormal operand is a zero of its sign); an
// exact product below 2^-126 in magnitude is a zero of the xor of the signs, one of 2^128 or more
// an infinity; inf * 0 and any NaN operand give the canonical NaN 0x7FC00000; inf * x = +-inf.
module tpu_bf16_mul (
  input  logic [15:0] a_i,
  input  logic [15:0] b_i,
  output logic [31:0] prod_o
);

  localparam logic [31:0] CanonNan = 32'h7FC0_0000;

  logic a_zero, b_zero, a_inf, b_inf, a_nan, b_nan, sign;
  assign a_zero = (a_i[14:7] == 8'd0);
  assign b_zero = (b_i[14:7] == 8'd0);
  assign a_inf  = (a_i[14:7] == 8'hFF) && (a_i[6:0] == 7'd0);
  assign b_inf  = (b_i[14:7] == 8'hFF) && (b_i[6:0] == 7'd0);
  assign a_nan  = (a_i[14:7] == 8'hFF) && (a_i[6:0] != 7'd0);
  assign b_nan  = (b_i[14:7] == 8'hFF) && (b_i[6:0] != 7'd0);
  assign sign   = a_i[15] ^ b_i[15];

  // 8x8 significand product in [2^14, 2^16); the exponent sum is biased once.
  logic [15:0] p;
  logic [9:0]  e;
  logic [22:0] frac;
  assign p    = {1'b1, a_i[6:0]} * {1'b1, b_i[6:0]};
  assign e    = {2'b00, a_i[14:7]} + {2'b00, b_i[14:7]} - 10'd127 + {9'd0, p[15]};
  assign frac = p[15] ? {p[14:0], 8'd0} : {p[13:0], 9'd0};

  always_comb begin
    if (a_nan || b_nan || (a_inf && b_zero) || (b_inf && a_zero)) begin
      prod_o = CanonNan;
    end else if (a_inf || b_inf) begin
      prod_o = {sign, 8'hFF, 23'd0};
    end else if (a_zero || b_zero || ($signed(e) <= 10'sd0)) begin
      prod_o = {sign, 31'd0};
    end else if ($signed(e) >= 10'sd255) begin
      prod_o = {sign, 8'hFF, 23'd0};
    end else begin
      prod_o = {sign, e[7:0], frac};
    end
  end

  logic unused_mul;
  assign unused_mul = ^e[9:8];

endmodule
