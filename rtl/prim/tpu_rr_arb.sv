// Round-robin arbiter for any number of requesters, with the grant held while the granted
// request waits (so a request on an AXI-style channel stays stable until it is taken).
//
// The granted requester is the first one at or after the one after the last *taken* grant
// (cyclically); at reset the search starts at requester 0. `valid_o` is |req_i and `idx_o` /
// `gnt_o` the choice in the same cycle (zero latency). When the consumer does not take the grant
// (`valid_o && !ack_i`), the same requester stays granted in the next cycle; it must keep
// requesting (asserted). With no request, idx_o points at the last taken requester and gnt_o is 0.
`include "tpu_assert.svh"

module tpu_rr_arb #(
  parameter int unsigned N = 2,
  localparam int unsigned IdxW = (N > 1) ? $clog2(N) : 1
) (
  input  logic            clk_i,
  input  logic            rst_ni,
  input  logic [N-1:0]    req_i,
  input  logic            ack_i,     // the consumer takes the granted request this cycle
  output logic            valid_o,   // some request is granted
  output logic [N-1:0]    gnt_o,     // one-hot grant (0 when valid_o is 0)
  output logic [IdxW-1:0] idx_o      // index of the granted requester
);

  localparam logic [IdxW-1:0] LastIdx = IdxW'(N - 1);

  logic            lock_q;
  logic [IdxW-1:0] lock_idx_q, last_q;
  logic [IdxW-1:0] idx;

  // First requester after last_q, cyclically; last_q itself comes last.
  always_comb begin
    logic [IdxW-1:0] c;
    logic            found;
    idx   = last_q;
    found = 1'b0;
    c     = last_q;
    for (int unsigned k = 0; k < N; k++) begin
      c = (c == LastIdx) ? '0 : c + 1'b1;
      if (!found && req_i[c]) begin
        idx   = c;
        found = 1'b1;
      end
    end
    if (lock_q) idx = lock_idx_q;
  end

  assign valid_o = |req_i;
  assign idx_o   = idx;
  assign gnt_o   = valid_o ? (N'(1) << idx) : '0;

  always_ff @(posedge clk_i) begin
    if (!rst_ni) begin
      lock_q     <= 1'b0;
      lock_idx_q <= '0;
      last_q     <= LastIdx;
    end else begin
      lock_q     <= valid_o && !ack_i;
      lock_idx_q <= idx;
      if (valid_o && ack_i) last_q <= idx;
    end
  end

  `TPU_ASSERT_INIT(ArbN_A, N >= 1)
  `TPU_ASSERT(GrantedKeepsRequesting_A, lock_q |-> req_i[lock_idx_q], clk_i, !rst_ni)

endmodule
