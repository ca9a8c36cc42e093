// Processing element of the weight-stationary MXU.
//
// Holds two int8 weight registers (double buffer) and a select bit; the selected one is active,
// the other is the shadow. Activations arrive from the left and leave to the right one cycle later;
// partial sums arrive from above and leave below one cycle later:
//   psum_o <= psum_i + act_i * w_active   (int8 x int8, int32 accumulate, wrap-around)
// swap_i travels with the activation: when set, this activation already uses the shadow weight and
// the select flips (active <-> shadow exchange), so a flip reaches each PE exactly with the first
// row of the MATMUL that requested it.
// The weight shift chain runs down the column through the shadow registers: when wshift_en_i is
// set the shadow register takes wshift_i (the shadow of the PE above, or the column feed).
module tpu_pe (
  input  logic        clk_i,
  input  logic        rst_ni,
  // activations, left to right
  input  logic [7:0]  act_i,
  input  logic        swap_i,
  output logic [7:0]  act_o,
  output logic        swap_o,
  // partial sums, top to bottom
  input  logic [31:0] psum_i,
  output logic [31:0] psum_o,
  // weight shift chain, top to bottom, into the shadow register
  input  logic        wshift_en_i,
  input  logic [7:0]  wshift_i,
  output logic [7:0]  wshadow_o
);

  logic [7:0]  w0_q, w1_q;
  logic        sel_q;      // 0: w0 active, 1: w1 active
  logic        sel_eff;    // select seen by the activation of this cycle
  logic [7:0]  w_act;
  logic [31:0] prod;
  logic [7:0]  act_q;
  logic        swap_q;
  logic [31:0] psum_q;

  assign sel_eff   = sel_q ^ swap_i;
  assign w_act     = sel_eff ? w1_q : w0_q;
  assign wshadow_o = sel_q ? w0_q : w1_q;
  // Signed 8x8 product, sign-extended to 32 bits. Synthesis gets the 8x8 signed multiplier; the
  // simulator gets the same value as a plain 32-bit multiply of the sign-extended operands (the
  // signed-multiply helper of the simulator costs the 16x16 array about 15% of its rate).
  // tests/rtl/synth simulates the synthesized netlist against this RTL.
`ifdef VERILATOR
  assign prod = {{24{act_i[7]}}, act_i} * {{24{w_act[7]}}, w_act};
`else
  logic signed [15:0] prod_s;
  assign prod_s = $signed(act_i) * $signed(w_act);
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
        if (sel_q) w0_q <= wshift_i;
        else       w1_q <= wshift_i;
      end
    end
  end

  always_ff @(posedge clk_i) begin
    act_q  <= act_i;
    psum_q <= psum_i + prod;
  end

  assign act_o  = act_q;
  assign swap_o = swap_q;
  assign psum_o = psum_q;

endmodule
