// Up/down counter: q <= q + incr_i - decr_i every cycle, wrapping modulo 2^Width or (Saturate)
// clamped to [0, 2^Width - 1]. Reset and `clr_i` (a synchronous clear with priority over the
// count) load ResetValue. One cell for occupancy, credit and event counters alike; event
// counters set CountDown = 0, which drops decr_i and its subtractor (synthesis keeps the
// hierarchy, so a constant port would not fold away).
`include "tpu_assert.svh"

module tpu_counter #(
  parameter int unsigned Width    = 8,
  parameter bit          Saturate = 1'b0,
  parameter bit          CountDown = 1'b1,
  parameter int unsigned ResetValue = 0
) (
  input  logic             clk_i,
  input  logic             rst_ni,
  input  logic             clr_i,
  input  logic [Width-1:0] incr_i,
  input  logic [Width-1:0] decr_i,
  output logic [Width-1:0] q_o
);

  logic [Width-1:0] q_q, decr;

  if (CountDown) begin : g_down
    assign decr = decr_i;
  end else begin : g_up
    assign decr = '0;
    logic unused_decr;
    assign unused_decr = ^decr_i;
  end

  if (Saturate) begin : g_sat
    logic [Width+1:0] sum;   // two's complement, one bit of headroom each way
    logic [Width-1:0] q_d;
    assign sum = {2'b00, q_q} + {2'b00, incr_i} - {2'b00, decr};
    always_comb begin
      if (sum[Width+1])     q_d = '0;         // below zero
      else if (sum[Width])  q_d = '1;         // above the maximum
      else                  q_d = sum[Width-1:0];
    end
    always_ff @(posedge clk_i) begin
      if (!rst_ni || clr_i) begin
        q_q <= Width'(ResetValue);
      end else begin
        q_q <= q_d;
      end
    end
  end else begin : g_wrap
    // The sum lives inside the clocked block: Verilator then evaluates it once per rising edge
    // instead of on every input change (the perf counters are 64 bits wide and see top-level
    // inputs, so a continuous sum landed in the input-combinational pass of every eval).
    always_ff @(posedge clk_i) begin
      if (!rst_ni || clr_i) begin
        q_q <= Width'(ResetValue);
      end else begin
        q_q <= q_q + incr_i - decr;
      end
    end
  end

  assign q_o = q_q;

  `TPU_ASSERT_INIT(CounterWidth_A, Width >= 1)

endmodule
