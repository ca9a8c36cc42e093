// Floating-point arithmetic of the device's numerics contract (docs/numerics.md), as functions.
// This is the one definition: the PE, the activation unit, the weight-gradient accumulation and
// the vector unit all call these, and the C++ twins are tpuw::num (host/include/tpuw/numerics.h).
//   fp32_add(a, b)     fp32 + fp32, rules 1-6 (a subtraction flips b's sign first)
//   fp32_mul(a, b)     fp32 x fp32, rules 1-6 (the vector unit)
//   bf16_mul(a, b)     bf16 x bf16 -> exact fp32 product (tiny -> signed 0, huge -> signed inf)
//   bf16_mul_sig(a, b, p)  the same, given the significand product p (one multiplier per PE)
//   fp32_to_bf16(a)    rule 7 ({fp32_to_bf16(a), 16'd0} is fp32 -> bf16 -> fp32, rules 7 and 8)
// The cells rtl/prim/tpu_fp32_add.sv, tpu_fp32_mul.sv, tpu_bf16_mul.sv and tpu_fp32_to_bf16.sv
// wrap them one to one (tests/rtl/fp_prims_test.cpp and fp32_test.cpp check them bit for bit).
// Datapaths that must not evaluate the fp logic when idle or in int8 mode (tpu_pe, tpu_vpu) call
// the functions inside a procedural `if` on the mode or enable: the simulator then runs them only
// on that branch, while a module instance is evaluated every cycle.
// (No `return`: Yosys 0.23 wants the result assigned to the function name.) The functions are not
// inlined by Verilator (no_inline_task): one C++ function each, called only when the branch is
// taken, instead of the locals of 256 inlined copies initialized on every evaluation of the array.
package tpu_fp_pkg;

  localparam logic [31:0] FP32_NAN = 32'h7FC0_0000;
  localparam logic [15:0] BF16_NAN = 16'h7FC0;

  // fp32 + fp32. The operand of larger magnitude is x, the other y; y's 24-bit significand is
  // aligned with three extra bits (guard, round, sticky: every bit shifted past them ORs into the
  // last), enough for a correctly rounded sum or difference (one normalizing right shift after a
  // carry, or a left shift after cancellation, which is exact whenever it is more than one place).
  // Results below 2^-126 are exact sums of two normals and flush to a zero of their sign; 2^128
  // and more after rounding is an infinity. Exponents are kept biased by +32 (never negative).
  function automatic logic [31:0] fp32_add(input logic [31:0] a, input logic [31:0] b);
    /* verilator no_inline_task */
    logic        sa, sb, sx, sy;
    logic [7:0]  ea, eb, ex, ey, d;
    logic [22:0] fa, fb, fx, fy;
    logic        a_zero, b_zero, a_inf, b_inf, a_nan, b_nan;
    logic [26:0] mx, my_full, my;
    logic        my_sticky;
    logic [27:0] r;
    logic [4:0]  lz;
    logic [26:0] n;
    logic [9:0]  e_n, e_r;      // biased exponent + 32 (kept non-negative)
    logic        g, st, inc;
    logic [24:0] m_r;
    logic [22:0] frac_r;
    {sa, ea, fa} = a;
    {sb, eb, fb} = b;
    a_zero = (ea == 8'd0);
    b_zero = (eb == 8'd0);
    a_inf  = (ea == 8'hFF) && (fa == '0);
    b_inf  = (eb == 8'hFF) && (fb == '0);
    a_nan  = (ea == 8'hFF) && (fa != '0);
    b_nan  = (eb == 8'hFF) && (fb != '0);
    // x: the operand of larger magnitude.
    if ({eb, fb} > {ea, fa}) begin
      {sx, ex, fx} = b;
      {sy, ey, fy} = a;
    end else begin
      {sx, ex, fx} = a;
      {sy, ey, fy} = b;
    end
    // Significands with guard, round and sticky bits; y aligned to x.
    d       = ex - ey;
    mx      = {1'b1, fx, 3'b000};
    my_full = {1'b1, fy, 3'b000};
    if (d >= 8'd27) begin
      my        = '0;
      my_sticky = 1'b1;
    end else begin
      my        = my_full >> d;
      my_sticky = |(my_full & ~({27{1'b1}} << d));
    end
    my[0] = my[0] | my_sticky;
    r = (sx ^ sy) ? ({1'b0, mx} - {1'b0, my}) : ({1'b0, mx} + {1'b0, my});
    // Leading zeros of r (r[27]: the carry of an addition).
    lz = 5'd28;
    for (int i = 0; i <= 27; i++) begin
      if (r[i]) lz = 5'(27 - i);
    end
    // Normalize: leading one at n[26]; 24 significand bits, guard n[2], sticky n[1:0].
    if (r[27]) begin
      n   = {r[27:2], r[1] | r[0]};
      e_n = {2'b00, ex} + 10'd33;
    end else begin
      n   = 27'(r << (lz - 5'd1));
      e_n = {2'b00, ex} + 10'd33 - {5'd0, lz};
    end
    g      = n[2];
    st     = n[1] | n[0];
    inc    = g && (st || n[3]);
    m_r    = {1'b0, n[26:3]} + {24'd0, inc};
    e_r    = e_n + {9'd0, m_r[24]};
    frac_r = m_r[24] ? m_r[23:1] : m_r[22:0];
    if (a_nan || b_nan || (a_inf && b_inf && (sa != sb))) begin
      fp32_add = FP32_NAN;
    end else if (a_inf) begin
      fp32_add = {sa, 8'hFF, 23'd0};
    end else if (b_inf) begin
      fp32_add = {sb, 8'hFF, 23'd0};
    end else if (a_zero && b_zero) begin
      fp32_add = {sa & sb, 31'd0};
    end else if (b_zero) begin
      fp32_add = a;
    end else if (a_zero) begin
      fp32_add = b;
    end else if (r == '0) begin
      fp32_add = 32'd0;                     // x + (-x) = +0
    end else if (e_n < 10'd33) begin
      fp32_add = {sx, 31'd0};               // below 2^-126 (exact): flushed
    end else if (e_r > 10'd286) begin
      fp32_add = {sx, 8'hFF, 23'd0};        // rounded biased exponent > 254: overflow
    end else begin
      fp32_add = {sx, 8'(e_r - 10'd32), frac_r};
    end
  endfunction

  // fp32 x fp32, rules 1-6 (the vector unit's multiplier): one rounding of the exact 48-bit
  // significand product; flush before rounding (an exact product below 2^-126 is a signed zero
  // even if it would round up to the smallest normal). Exponents are kept biased by +127.
  function automatic logic [31:0] fp32_mul(input logic [31:0] a, input logic [31:0] b);
    /* verilator no_inline_task */
    logic        sa, sb, sp;
    logic [7:0]  ea, eb;
    logic [22:0] fa, fb;
    logic        a_zero, b_zero, a_inf, b_inf, a_nan, b_nan;
    logic [47:0] p;
    logic [9:0]  e_norm, e_r;   // biased exponent + 127 (kept non-negative)
    logic [23:0] m;
    logic        g, st, inc;
    logic [24:0] m_r;
    logic [22:0] frac_r;
    {sa, ea, fa} = a;
    {sb, eb, fb} = b;
    sp     = sa ^ sb;
    a_zero = (ea == 8'd0);  // zero or subnormal (flushed)
    b_zero = (eb == 8'd0);
    a_inf  = (ea == 8'hFF) && (fa == '0);
    b_inf  = (eb == 8'hFF) && (fb == '0);
    a_nan  = (ea == 8'hFF) && (fa != '0);
    b_nan  = (eb == 8'hFF) && (fb != '0);
    // Significand product of two normals: [2^46, 2^48).
    p = {24'd0, 1'b1, fa} * {24'd0, 1'b1, fb};
    // Biased exponent of the normalized exact product, plus 127: ea + eb + p[47].
    e_norm = {2'b00, ea} + {2'b00, eb} + {9'd0, p[47]};
    if (p[47]) begin
      m  = p[47:24];
      g  = p[23];
      st = |p[22:0];
    end else begin
      m  = p[46:23];
      g  = p[22];
      st = |p[21:0];
    end
    inc    = g && (st || m[0]);
    m_r    = {1'b0, m} + {24'd0, inc};
    e_r    = e_norm + {9'd0, m_r[24]};            // 1.11..1 rounded up to 10.0
    frac_r = m_r[24] ? m_r[23:1] : m_r[22:0];     // m_r[24]: the fraction is zero
    if (a_nan || b_nan || (a_inf && b_zero) || (b_inf && a_zero)) begin
      fp32_mul = FP32_NAN;
    end else if (a_inf || b_inf) begin
      fp32_mul = {sp, 8'hFF, 23'd0};
    end else if (a_zero || b_zero) begin
      fp32_mul = {sp, 31'd0};
    end else if (e_norm < 10'd128) begin
      fp32_mul = {sp, 31'd0};               // exact product below 2^-126: flushed
    end else if (e_r > 10'd381) begin
      fp32_mul = {sp, 8'hFF, 23'd0};        // rounded biased exponent > 254: overflow
    end else begin
      fp32_mul = {sp, 8'(e_r - 10'd127), frac_r};
    end
  endfunction

  // bf16 x bf16 -> fp32 (bf16_mul below) given p = {1, a[6:0]} x {1, b[6:0]}, the product of the
  // two significands (in [2^14, 2^16)), computed by the caller: the synthesized PE has one
  // multiplier for its int8 and bf16 rows.
  function automatic logic [31:0] bf16_mul_sig(input logic [15:0] a, input logic [15:0] b,
                                               input logic [15:0] p);
    logic        a_zero, b_zero, a_inf, b_inf, a_nan, b_nan, sign;
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
    bf16_mul_sig = r;
  endfunction

  // bf16 x bf16 -> fp32. The 8x8 significand product has at most 16 significant bits: exact.
  function automatic logic [31:0] bf16_mul(input logic [15:0] a, input logic [15:0] b);
    /* verilator no_inline_task */
    bf16_mul = bf16_mul_sig(a, b, {8'd0, 1'b1, a[6:0]} * {8'd0, 1'b1, b[6:0]});
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
