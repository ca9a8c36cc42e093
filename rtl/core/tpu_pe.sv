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
// evaluate it for int8 rows. With EnableBf16 = 0 the PE is the int8-only PE: 8-bit weight
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
  parameter bit EnableBf16 = 1'b1
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
  input  logic [31:0] psum_i,
  output logic [31:0] psum_o,
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
  logic [31:0]   psum_q;

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

  if (EnableBf16) begin : g_bf16
    logic bf16_q;
`ifdef VERILATOR
    // Two result registers, each written on its own branch: with one register Verilator folds the
    // branches into one conditional expression and evaluates the fp path for int8 rows too.
    logic [31:0] psum_fp_q, psum_int_q;
    always_ff @(posedge clk_i) begin
      bf16_q <= bf16_i;
      if (bf16_i) psum_fp_q  <= tpu_fp_pkg::fp32_add(psum_i, tpu_fp_pkg::bf16_mul(act_i, w_act));
      else        psum_int_q <= psum_i + prod;
    end
    assign psum_q = bf16_q ? psum_fp_q : psum_int_q;
`else
    always_ff @(posedge clk_i) begin
      bf16_q <= bf16_i;
      if (bf16_i) psum_q <= tpu_fp_pkg::fp32_add(psum_i, tpu_fp_pkg::bf16_mul(act_i, w_act));
      else        psum_q <= psum_i + prod;
    end
`endif
    assign act_o     = act_q;
    assign bf16_o    = bf16_q;
    assign wshadow_o = w_shadow;
  end else begin : g_int8
    always_ff @(posedge clk_i) begin
      psum_q <= psum_i + prod;
    end
    assign act_o     = {8'd0, act_q};
    assign bf16_o    = 1'b0;
    assign wshadow_o = {{8{w_shadow[7]}}, w_shadow};
    logic unused_hi;
    assign unused_hi = ^{act_i[15:8], bf16_i, wshift_up_i[15:8], wshift_left_i[15:8]};
  end

  assign swap_o = swap_q;
  assign psum_o = psum_q;

endmodule
