// fp32 arithmetic of docs/numerics.md as functions, for use inside a module (`include this file
// in the module body). The vector unit calls them from clocked blocks under an enable, so an idle
// unit costs a simulator nothing; tpu_fp32_mul wraps tpu_fp32_mul_f as a combinational cell.
// The C++ twins are tpuw::num::mul / add / round_bf16 (host/include/tpuw/numerics.h).
//   rule 1  subnormal operands read as zeros of the same sign;
//   rule 2  round to nearest, ties to even, once, on the exact result (guard + sticky);
//   rule 3  flush BEFORE rounding: an exact result below 2^-126 is a zero of its sign (for a
//           product even if it would round up to the smallest normal; a sum of normals that small
//           is always exact); a rounded magnitude of 2^128 or more is an infinity;
//   rule 4  x + (-x) = +0, (-0) + (-0) = -0, (+0) + (-0) = +0; a product's sign is the xor;
//   rule 5  any NaN operand (and inf * 0, inf - inf) gives the canonical NaN 0x7FC00000;
//   rule 6  infinities propagate.

// a * b
function automatic logic [31:0] tpu_fp32_mul_f(input logic [31:0] a, input logic [31:0] b);
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
    tpu_fp32_mul_f = 32'h7FC0_0000;
  end else if (a_inf || b_inf) begin
    tpu_fp32_mul_f = {sp, 8'hFF, 23'd0};
  end else if (a_zero || b_zero) begin
    tpu_fp32_mul_f = {sp, 31'd0};
  end else if (e_norm < 10'd128) begin
    tpu_fp32_mul_f = {sp, 31'd0};               // exact product below 2^-126: flushed
  end else if (e_r > 10'd381) begin
    tpu_fp32_mul_f = {sp, 8'hFF, 23'd0};        // rounded biased exponent > 254: overflow
  end else begin
    tpu_fp32_mul_f = {sp, 8'(e_r - 10'd127), frac_r};
  end
endfunction

// a + b
function automatic logic [31:0] tpu_fp32_add_f(input logic [31:0] a, input logic [31:0] b);
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
    tpu_fp32_add_f = 32'h7FC0_0000;
  end else if (a_inf) begin
    tpu_fp32_add_f = {sa, 8'hFF, 23'd0};
  end else if (b_inf) begin
    tpu_fp32_add_f = {sb, 8'hFF, 23'd0};
  end else if (a_zero && b_zero) begin
    tpu_fp32_add_f = {sa & sb, 31'd0};
  end else if (b_zero) begin
    tpu_fp32_add_f = a;
  end else if (a_zero) begin
    tpu_fp32_add_f = b;
  end else if (r == '0) begin
    tpu_fp32_add_f = 32'd0;                     // x + (-x) = +0
  end else if (e_n < 10'd33) begin
    tpu_fp32_add_f = {sx, 31'd0};               // below 2^-126 (exact): flushed
  end else if (e_r > 10'd286) begin
    tpu_fp32_add_f = {sx, 8'hFF, 23'd0};        // rounded biased exponent > 254: overflow
  end else begin
    tpu_fp32_add_f = {sx, 8'(e_r - 10'd32), frac_r};
  end
endfunction

// fp32 -> bf16 -> fp32 (rule 7 then rule 8): NaN -> 0x7FC00000, subnormal -> +-0, round the
// pattern to its upper 16 bits to nearest even (a finite value may round to +-inf).
function automatic logic [31:0] tpu_fp32_round_bf16_f(input logic [31:0] a);
  logic [31:0] x, r;
  if ((a[30:23] == 8'hFF) && (a[22:0] != '0)) begin
    tpu_fp32_round_bf16_f = 32'h7FC0_0000;
  end else begin
    x = (a[30:23] == 8'd0) ? {a[31], 31'd0} : a;
    r = (x + 32'h0000_7FFF + {31'd0, x[16]}) & 32'hFFFF_0000;
    tpu_fp32_round_bf16_f = r;
  end
endfunction
