// Floating-point arithmetic of the device's numerics contract (docs/numerics.md), as functions:
//   fp32_add(a, b)     fp32 + fp32, rules 1-6 (a subtraction flips b's sign first)
//   bf16_mul(a, b)     bf16 x bf16 -> exact fp32 product (tiny -> signed 0, huge -> signed inf)
//   fp32_to_bf16(a)    rule 7
// The cells rtl/prim/tpu_fp32_add.sv, tpu_bf16_mul.sv and tpu_fp32_to_bf16.sv wrap them one to
// one (tests/rtl/fp_prims_test.cpp checks those bit for bit). Datapaths that must not evaluate
// the fp logic in int8 mode (tpu_pe) call the functions inside a procedural `if` on the mode: the
// simulator then runs them only on that branch, while a module instance is evaluated every cycle.
// (No `return`: Yosys 0.23 wants the result assigned to the function name.) The functions are not
// inlined by Verilator (no_inline_task): one C++ function each, called only when the branch is
// taken, instead of the locals of 256 inlined copies initialized on every evaluation of the array.
package tpu_fp_pkg;

  localparam logic [31:0] FP32_NAN = 32'h7FC0_0000;
  localparam logic [15:0] BF16_NAN = 16'h7FC0;

  // fp32 + fp32. The operand of larger magnitude is x, the other y; y's 24-bit significand is
  // aligned with three extra bits (guard, round, sticky), enough for a correctly rounded sum or
  // difference (one normalizing right shift after a carry, or a left shift after cancellation,
  // which is exact whenever it is more than one place). Results below 2^-126 are exact sums of
  // two normals and flush to a zero of their sign; 2^128 and more after rounding is an infinity.
  function automatic logic [31:0] fp32_add(input logic [31:0] a, input logic [31:0] b);
    /* verilator no_inline_task */
    logic        a_zero, b_zero, a_inf, b_inf, a_nan, b_nan, sub, round_up;
    logic [31:0] x, y, r;
    logic [7:0]  d_full;
    logic [4:0]  d, lz;
    logic [26:0] xm, ym, m;
    logic [53:0] y_wide;
    logic [27:0] s;
    /* verilator lint_off UNUSEDSIGNAL */
    logic [24:0] mr;  // bit 23 is the hidden bit
    /* verilator lint_on UNUSEDSIGNAL */
    logic [9:0]  e, er;
    a_zero = (a[30:23] == 8'd0);
    b_zero = (b[30:23] == 8'd0);
    a_inf  = (a[30:23] == 8'hFF) && (a[22:0] == 23'd0);
    b_inf  = (b[30:23] == 8'hFF) && (b[22:0] == 23'd0);
    a_nan  = (a[30:23] == 8'hFF) && (a[22:0] != 23'd0);
    b_nan  = (b[30:23] == 8'hFF) && (b[22:0] != 23'd0);
    // order by magnitude: |x| >= |y|
    if (b[30:0] > a[30:0]) begin
      x = b;
      y = a;
    end else begin
      x = a;
      y = b;
    end
    sub    = x[31] ^ y[31];
    d_full = x[30:23] - y[30:23];
    d      = (d_full > 8'd27) ? 5'd27 : d_full[4:0];
    // align y: {significand, G, R, S}, every bit shifted past S ORed into S
    xm     = {1'b1, x[22:0], 3'b000};
    y_wide = {1'b1, y[22:0], 3'b000, 27'd0} >> d;
    ym     = {y_wide[53:28], y_wide[27] | (|y_wide[26:0])};
    // add or subtract (x >= y: never negative)
    s = sub ? ({1'b0, xm} - {1'b0, ym}) : ({1'b0, xm} + {1'b0, ym});
    // normalize: bit 26 is the hidden bit afterwards
    lz = 5'd27;
    for (int i = 0; i < 27; i++) begin
      if (s[i]) lz = 5'(26 - i);
    end
    if (s[27]) begin
      m = {s[27:2], s[1] | s[0]};
      e = {2'b00, x[30:23]} + 10'd1;
    end else begin
      m = s[26:0] << lz;
      e = {2'b00, x[30:23]} - {5'd0, lz};
    end
    // round to nearest, ties to even
    round_up = m[2] & (m[1] | m[0] | m[3]);
    mr       = {1'b0, m[26:3]} + {24'd0, round_up};
    er       = mr[24] ? (e + 10'd1) : e;
    if (a_nan || b_nan || (a_inf && b_inf && (a[31] != b[31]))) begin
      r = FP32_NAN;
    end else if (a_inf) begin
      r = {a[31], 8'hFF, 23'd0};
    end else if (b_inf) begin
      r = {b[31], 8'hFF, 23'd0};
    end else if (a_zero && b_zero) begin
      r = {a[31] & b[31], 31'd0};
    end else if (a_zero) begin
      r = b;
    end else if (b_zero) begin
      r = a;
    end else if (s == 28'd0) begin
      r = 32'd0;                           // exact cancellation: +0
    end else if ($signed(e) <= 10'sd0) begin
      r = {x[31], 31'd0};                  // below 2^-126 (exact): flush to zero
    end else if ($signed(er) >= 10'sd255) begin
      r = {x[31], 8'hFF, 23'd0};
    end else begin
      r = {x[31], er[7:0], mr[22:0]};
    end
    fp32_add = r;
  endfunction

  // bf16 x bf16 -> fp32. The 8x8 significand product has at most 16 significant bits: exact.
  function automatic logic [31:0] bf16_mul(input logic [15:0] a, input logic [15:0] b);
    /* verilator no_inline_task */
    logic        a_zero, b_zero, a_inf, b_inf, a_nan, b_nan, sign;
    logic [15:0] p;
    logic [9:0]  e;
    logic [22:0] frac;
    logic [31:0] r;
    a_zero = (a[14:7] == 8'd0);
    b_zero = (b[14:7] == 8'd0);
    a_inf  = (a[14:7] == 8'hFF) && (a[6:0] == 7'd0);
    b_inf  = (b[14:7] == 8'hFF) && (b[6:0] == 7'd0);
    a_nan  = (a[14:7] == 8'hFF) && (a[6:0] != 7'd0);
    b_nan  = (b[14:7] == 8'hFF) && (b[6:0] != 7'd0);
    sign   = a[15] ^ b[15];
    p      = {8'd0, 1'b1, a[6:0]} * {8'd0, 1'b1, b[6:0]};   // in [2^14, 2^16)
    e      = {2'b00, a[14:7]} + {2'b00, b[14:7]} - 10'd127 + {9'd0, p[15]};
    frac   = p[15] ? {p[14:0], 8'd0} : {p[13:0], 9'd0};
    if (a_nan || b_nan || (a_inf && b_zero) || (b_inf && a_zero)) begin
      r = FP32_NAN;
    end else if (a_inf || b_inf) begin
      r = {sign, 8'hFF, 23'd0};
    end else if (a_zero || b_zero || ($signed(e) <= 10'sd0)) begin
      r = {sign, 31'd0};
    end else if ($signed(e) >= 10'sd255) begin
      r = {sign, 8'hFF, 23'd0};
    end else begin
      r = {sign, e[7:0], frac};
    end
    bf16_mul = r;
  endfunction

  // fp32 -> bf16, rule 7: NaN -> 0x7FC0; subnormal -> signed zero; else round the pattern to its
  // upper half to nearest even (overflow past the largest bf16 carries into the infinity).
  function automatic logic [15:0] fp32_to_bf16(input logic [31:0] a);
    /* verilator no_inline_task */
    logic [15:0] rounded, r;
    rounded = 16'((a + 32'h0000_7FFF + {31'd0, a[16]}) >> 16);
    if ((a[30:23] == 8'hFF) && (a[22:0] != 23'd0)) begin
      r = BF16_NAN;
    end else if (a[30:23] == 8'd0) begin
      r = {a[31], 15'd0};
    end else begin
      r = rounded;
    end
    fp32_to_bf16 = r;
  endfunction

endpackage
