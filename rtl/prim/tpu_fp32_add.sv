// fp32 adder of the device's numerics contract (docs/numerics.md, rules 1-6), combinational:
//   sum_o = a_i + b_i
// - flush to zero on input: a subnormal operand reads as a zero of its sign;
// - one rounding, to nearest, ties to even, of the exact sum;
// - flush to zero on output, decided on the exact sum: a result below 2^-126 in magnitude is a
//   zero of the exact sum's sign (a sum of two normals that small is exact, so nothing is lost);
// - IEEE zeros: x + (-x) = +0, (-0) + (-0) = -0, (+0) + (-0) = +0;
// - NaN in or inf - inf gives the canonical NaN 0x7FC00000; inf + finite = that inf;
// - a rounded magnitude of 2^128 or more is an infinity of the sum's sign.
// A subtraction is this adder with b's sign flipped by the caller.
//
// Datapath: the operand of larger magnitude is `x`, the other `y`; y's 24-bit significand is
// aligned with three extra bits (guard, round, sticky), which is enough for a correctly rounded
// sum or difference (one normalizing right shift after a carry, or a left shift after
// cancellation, which is exact whenever it is more than one place).
module tpu_fp32_add (
  input  logic [31:0] a_i,
  input  logic [31:0] b_i,
  output logic [31:0] sum_o
);

  localparam logic [31:0] CanonNan = 32'h7FC0_0000;

  // ---- classify (after flush to zero on input) ----
  logic a_zero, b_zero, a_inf, b_inf, a_nan, b_nan;
  assign a_zero = (a_i[30:23] == 8'd0);
  assign b_zero = (b_i[30:23] == 8'd0);
  assign a_inf  = (a_i[30:23] == 8'hFF) && (a_i[22:0] == 23'd0);
  assign b_inf  = (b_i[30:23] == 8'hFF) && (b_i[22:0] == 23'd0);
  assign a_nan  = (a_i[30:23] == 8'hFF) && (a_i[22:0] != 23'd0);
  assign b_nan  = (b_i[30:23] == 8'hFF) && (b_i[22:0] != 23'd0);

  // ---- order by magnitude: |x| >= |y| ----
  logic        swap;
  logic [31:0] x, y;
  assign swap = (b_i[30:0] > a_i[30:0]);
  assign x    = swap ? b_i : a_i;
  assign y    = swap ? a_i : b_i;

  logic       sub;    // effective subtraction
  logic [7:0] d_full;
  logic [4:0] d;      // alignment shift, clamped (27 and more leave only the sticky bit)
  assign sub    = x[31] ^ y[31];
  assign d_full = x[30:23] - y[30:23];
  assign d      = (d_full > 8'd27) ? 5'd27 : d_full[4:0];

  // ---- align y: {significand, G, R, S} with every bit shifted past S ORed into S ----
  logic [26:0] xm, ym;
  logic [53:0] y_wide;
  logic        y_sticky;
  assign xm       = {1'b1, x[22:0], 3'b000};
  assign y_wide   = {1'b1, y[22:0], 3'b000, 27'd0} >> d;
  assign y_sticky = |y_wide[26:0];
  assign ym       = {y_wide[53:28], y_wide[27] | y_sticky};

  // ---- add or subtract (x >= y, so the difference is never negative) ----
  logic [27:0] s;
  assign s = sub ? ({1'b0, xm} - {1'b0, ym}) : ({1'b0, xm} + {1'b0, ym});

  // ---- normalize: bit 26 is the hidden bit afterwards ----
  logic [4:0]  lz;       // leading zeros of s[26:0] (27: s is zero)
  always_comb begin
    lz = 5'd27;
    for (int i = 0; i < 27; i++) begin
      if (s[i]) lz = 5'(26 - i);
    end
  end

  logic [26:0] m;        // normalized significand with G, R, S
  logic [9:0]  e;        // biased exponent of m, signed (may go below 1 after cancellation)
  always_comb begin
    if (s[27]) begin
      m = {s[27:2], s[1] | s[0]};
      e = {2'b00, x[30:23]} + 10'd1;
    end else begin
      m = s[26:0] << lz;
      e = {2'b00, x[30:23]} - {5'd0, lz};
    end
  end

  // ---- round to nearest, ties to even ----
  logic        round_up;
  logic [24:0] mr;       // rounded significand, with carry
  logic [9:0]  er;
  assign round_up = m[2] & (m[1] | m[0] | m[3]);
  assign mr       = {1'b0, m[26:3]} + {24'd0, round_up};
  assign er       = mr[24] ? (e + 10'd1) : e;

  logic tiny, ovf;
  assign tiny = $signed(e) <= 10'sd0;        // exact sum below 2^-126 (exact, so no rounding)
  assign ovf  = $signed(er) >= 10'sd255;

  // ---- result ----
  always_comb begin
    if (a_nan || b_nan || (a_inf && b_inf && (a_i[31] != b_i[31]))) begin
      sum_o = CanonNan;
    end else if (a_inf) begin
      sum_o = {a_i[31], 8'hFF, 23'd0};
    end else if (b_inf) begin
      sum_o = {b_i[31], 8'hFF, 23'd0};
    end else if (a_zero && b_zero) begin
      sum_o = {a_i[31] & b_i[31], 31'd0};
    end else if (a_zero) begin
      sum_o = b_i;
    end else if (b_zero) begin
      sum_o = a_i;
    end else if (s == 28'd0) begin
      sum_o = 32'd0;                             // exact cancellation: +0
    end else if (tiny) begin
      sum_o = {x[31], 31'd0};
    end else if (ovf) begin
      sum_o = {x[31], 8'hFF, 23'd0};
    end else begin
      sum_o = {x[31], er[7:0], mr[22:0]};
    end
  end

  logic unused_add;
  assign unused_add = ^{er[9:8], d_full[7:5], y_wide[27], mr[23]};

endmodule
