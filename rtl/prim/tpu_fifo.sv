// Synchronous FIFO: registered storage, combinational read of the head (first-word fall-through).
// Depth may be any value >= 1. `flush_i` empties it. No push when full, no pop when empty
// (asserted); a push and a pop in the same cycle are allowed when neither rule is broken.
`include "tpu_assert.svh"

module tpu_fifo #(
  parameter int unsigned Width = 8,
  parameter int unsigned Depth = 4,
  localparam int unsigned PtrW = (Depth > 1) ? $clog2(Depth) : 1,
  localparam int unsigned CntW = $clog2(Depth + 1)
) (
  input  logic             clk_i,
  input  logic             rst_ni,
  input  logic             flush_i,
  input  logic             push_i,
  input  logic [Width-1:0] wdata_i,
  input  logic             pop_i,
  output logic [Width-1:0] rdata_o,
  output logic             empty_o,
  output logic             full_o,
  output logic [CntW-1:0]  count_o
);

  logic [Width-1:0] mem_q [Depth];
  logic [PtrW-1:0]  wptr_q, rptr_q;
  logic [CntW-1:0]  cnt_q;

  localparam logic [PtrW-1:0] LastPtr = PtrW'(Depth - 1);

  function automatic logic [PtrW-1:0] incr(input logic [PtrW-1:0] p);
    if (p == LastPtr) incr = {PtrW{1'b0}};
    else incr = p + 1'b1;
  endfunction

  always_ff @(posedge clk_i) begin
    if (!rst_ni || flush_i) begin
      wptr_q <= '0;
      rptr_q <= '0;
      cnt_q  <= '0;
    end else begin
      if (push_i) wptr_q <= incr(wptr_q);
      if (pop_i)  rptr_q <= incr(rptr_q);
      if (push_i && !pop_i)      cnt_q <= cnt_q + CntW'(1);
      else if (pop_i && !push_i) cnt_q <= cnt_q - CntW'(1);
    end
  end

  always_ff @(posedge clk_i) begin
    if (push_i) mem_q[wptr_q] <= wdata_i;
  end

  assign rdata_o = mem_q[rptr_q];
  assign empty_o = (cnt_q == '0);
  assign full_o  = (cnt_q == CntW'(Depth));
  assign count_o = cnt_q;

  `TPU_ASSERT_INIT(DepthPositive_A, Depth >= 1)
  `TPU_ASSERT_NEVER(PushFull_A, push_i && full_o && !flush_i, clk_i, !rst_ni)
  `TPU_ASSERT_NEVER(PopEmpty_A, pop_i && empty_o && !flush_i, clk_i, !rst_ni)

endmodule
