// Processing element of the weight-stationary MXU.
//
// Holds two 16-bit weight registers (double buffer) and a select bit; the selected one is active,
// the other is the shadow. Activations arrive from the left and leave to the right one cycle later;
// partial sums arrive from above and leave below one cycle later. The row mode bf16_i travels
// with the activation (like swap_i) and selects the arithmetic of this row:
//   int8: psum_o <= psum_i + act_i[7:0] * w_active[7:0]   (signed, int32 accumulate, wrap-around)
//   bf16: psum_o <= fp32_add(psum_i, bf16_mul(act_i, w_active))   (docs/numerics.md: the product
//         is exact, one round-to-nearest-even addition)
// The fp arithmetic is called inside the procedural `if` on the mode, so the simulator does not
// evaluate it for int8 rows. With SplitPsum (the simulation build of tpu_mxu, EnableBf16 = 1) the
// partial-sum ports are 64 bits, {fp32 sum, int32 sum}: each sum has its own register, written only
// by rows of its mode, and a PE reads the half of its mode from the PE above (the partial sum it
// receives belongs to the same activation row, so to the same mode). There is then no per-PE
// select between the two sums (only the column outputs at the bottom of the array choose), and an
// int8 row costs the simulator what it costs in the int8-only array. Synthesis keeps one 32-bit
// partial-sum register (SplitPsum = 0). With EnableBf16 = 0 the PE is the int8-only PE: 8-bit weight
// registers and activations, no fp logic (the upper bits of the 16-bit ports are ignored, the
// shadow output is the sign-extended byte, as an int8 LOADW would store it).
// swap_i travels with the activation: when set, this activation already uses the shadow weight and
// the select flips (active <-> shadow exchange), so a flip reaches each PE exactly with the first
// row of the MATMUL that requested it.
// Weight shift chains run through the shadow registers, down the column (wshift_up_i: the shadow
// of the PE above, or the column feed) or, for a transposed tile (wshift_tr_i), along the row
// (wshift_left_i: the shadow of the PE to the left, or the row feed). When wshift_en_i is set the
// shadow register takes the selected one.
module tpu_pe #(
  parameter bit EnableBf16 = 1'b1,
  parameter bit SplitPsum  = 1'b0,   // 64-bit {fp32, int32} partial sums (needs EnableBf16)
  localparam int unsigned PsumW = (EnableBf16 && SplitPsum) ? 64 : 32
) (
  input  logic        clk_i,
  input  logic        rst_ni,
  // activations, left to right
  input  logic [15:0] act_i,
  input  logic        bf16_i,
  input  logic        swap_i,
  output logic [15:0] act_o,
  output logic        bf16_o,
  output logic        swap_o,
  // partial sums, top to bottom
  input  logic [PsumW-1:0] psum_i,
  output logic [PsumW-1:0] psum_o,
  // weight shift chains into the shadow register
  input  logic        wshift_en_i,
  input  logic        wshift_tr_i,
  input  logic [15:0] wshift_up_i,
  input  logic [15:0] wshift_left_i,
  output logic [15:0] wshadow_o
);

  localparam int unsigned Ww = EnableBf16 ? 16 : 8;

  logic [Ww-1:0] w0_q, w1_q;
  logic          sel_q;      // 0: w0 active, 1: w1 active
  logic          sel_eff;    // select seen by the activation of this cycle
  logic [Ww-1:0] w_act, w_shadow, w_in;
  logic [31:0]   prod;
  logic [Ww-1:0] act_q;
  logic          swap_q;

  assign sel_eff  = sel_q ^ swap_i;
  assign w_act    = sel_eff ? w1_q : w0_q;
  assign w_shadow = sel_q ? w0_q : w1_q;
  assign w_in     = wshift_tr_i ? wshift_left_i[Ww-1:0] : wshift_up_i[Ww-1:0];
  // Signed 8x8 product, sign-extended to 32 bits. Synthesis gets the 8x8 signed multiplier; the
  // simulator gets the same value as a plain 32-bit multiply of the sign-extended operands (the
  // signed-multiply helper of the simulator costs the 16x16 array about 15% of its rate).
  // tests/rtl/synth simulates the synthesized netlist against this RTL.
`ifdef VERILATOR
  assign prod = {{24{act_i[7]}}, act_i[7:0]} * {{24{w_act[7]}}, w_act[7:0]};
`else
  logic signed [15:0] prod_s;
  assign prod_s = $signed(act_i[7:0]) * $signed(w_act[7:0]);
  assign prod   = {{16{prod_s[15]}}, prod_s};
`endif

  always_ff @(posedge clk_i) begin
    if (!rst_ni) begin
      sel_q  <= 1'b0;
      swap_q <= 1'b0;
      w0_q   <= '0;
      w1_q   <= '0;
    end else begin
      sel_q  <= sel_eff;
      swap_q <= swap_i;
      if (wshift_en_i) begin
        if (sel_q) w0_q <= w_in;
        else       w1_q <= w_in;
      end
    end
  end

  always_ff @(posedge clk_i) begin
    act_q <= act_i[Ww-1:0];
  end

  if (EnableBf16 && SplitPsum) begin : g_bf16_split
    logic        bf16_q;
    logic [63:0] psum_q;  // {fp32 sum, int32 sum}: one variable, so the PE below reads it directly
    always_ff @(posedge clk_i) begin
      bf16_q <= bf16_i;
      if (bf16_i) psum_q[63:32] <= tpu_fp_pkg::fp32_add(psum_i[63:32], tpu_fp_pkg::bf16_mul(act_i, w_act));
      else        psum_q[31:0]  <= psum_i[31:0] + prod;
    end
    assign psum_o    = psum_q;
    assign act_o     = act_q;
    assign bf16_o    = bf16_q;
    assign wshadow_o = w_shadow;
  end else if (EnableBf16) begin : g_bf16
    // One signed 9x9 multiplier for both modes (one DSP block): an int8 row multiplies the
    // sign-extended bytes, a bf16 row the two significands {1, m[6:0]} (non-negative). Either
    // product fits in the low 16 bits.
    logic               bf16_q;
    logic [31:0]        psum_q;
    logic signed [8:0]  mul_a, mul_b;
    logic signed [17:0] mul_p;
    assign mul_a = bf16_i ? {2'b01, act_i[6:0]} : {act_i[7], act_i[7:0]};
    assign mul_b = bf16_i ? {2'b01, w_act[6:0]} : {w_act[7], w_act[7:0]};
    assign mul_p = mul_a * mul_b;
    always_ff @(posedge clk_i) begin
      bf16_q <= bf16_i;
      if (bf16_i) psum_q <= tpu_fp_pkg::fp32_add(psum_i, tpu_fp_pkg::bf16_mul_sig(act_i, w_act, mul_p[15:0]));
      else        psum_q <= psum_i + {{16{mul_p[15]}}, mul_p[15:0]};
    end
    logic unused_prod;
    assign unused_prod = ^{prod, mul_p[17:16]};
    assign psum_o    = psum_q;
    assign act_o     = act_q;
    assign bf16_o    = bf16_q;
    assign wshadow_o = w_shadow;
  end else begin : g_int8
    logic [31:0] psum_q;
    always_ff @(posedge clk_i) begin
      psum_q <= psum_i + prod;
    end
    assign psum_o    = psum_q;
    assign act_o     = {8'd0, act_q};
    assign bf16_o    = 1'b0;
    assign wshadow_o = {{8{w_shadow[7]}}, w_shadow};
    logic unused_hi;
    assign unused_hi = ^{act_i[15:8], bf16_i, wshift_up_i[15:8], wshift_left_i[15:8]};
  end

  assign swap_o = swap_q;

endmodule
