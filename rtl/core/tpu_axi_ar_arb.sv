// Two-master AXI read-address arbiter (instruction fetch and LOAD). Round-robin; the grant is
// held while the granted request waits for arready, so AR stays stable on the bus. Zero
// latency: a request is visible on the bus the cycle it is offered.
`include "tpu_assert.svh"

module tpu_axi_ar_arb (
  input  logic        clk_i,
  input  logic        rst_ni,
  input  logic [1:0]  req_valid_i,
  output logic [1:0]  req_ready_o,
  input  logic [31:0] req0_addr_i,
  input  logic [7:0]  req0_len_i,
  input  logic [31:0] req1_addr_i,
  input  logic [7:0]  req1_len_i,
  output logic        arvalid_o,
  input  logic        arready_i,
  output logic        arsel_o,     // index of the granted master (= its ARID)
  output logic [31:0] araddr_o,
  output logic [7:0]  arlen_o
);

  logic lock_q, lock_sel_q, last_q;
  logic sel;

  always_comb begin
    if (lock_q) begin
      sel = lock_sel_q;
    end else if (req_valid_i == 2'b11) begin
      sel = !last_q;
    end else begin
      sel = req_valid_i[1];
    end
  end

  assign arvalid_o = |req_valid_i;
  assign arsel_o   = sel;
  assign araddr_o  = sel ? req1_addr_i : req0_addr_i;
  assign arlen_o   = sel ? req1_len_i : req0_len_i;
  assign req_ready_o = {sel && arready_i, !sel && arready_i};

  always_ff @(posedge clk_i) begin
    if (!rst_ni) begin
      lock_q     <= 1'b0;
      lock_sel_q <= 1'b0;
      last_q     <= 1'b1;
    end else begin
      lock_q     <= arvalid_o && !arready_i;
      lock_sel_q <= sel;
      if (arvalid_o && arready_i) last_q <= sel;
    end
  end

  `TPU_ASSERT(GrantedValid_A, lock_q |-> req_valid_i[lock_sel_q], clk_i, !rst_ni)
  `TPU_ASSERT(ArStable_A, arvalid_o && !arready_i |=> arvalid_o && $stable(araddr_o) &&
              $stable(arlen_o) && $stable(arsel_o), clk_i, !rst_ni)

endmodule
