// Fixed-latency delay line: q_o is d_i delayed by Depth clock cycles (Depth = 0: a wire).
// Used for the MXU's input skew, output de-skew, weight-column skew and tag pipelines.
// With Reset set the stages clear to zero in reset (for valid/control bits); data stages
// leave it off so the simulator does not evaluate a reset branch for wide vectors.
module tpu_delay #(
  parameter int unsigned Width = 1,
  parameter int unsigned Depth = 1,
  parameter bit          Reset = 1'b0
) (
  input  logic             clk_i,
  input  logic             rst_ni,
  input  logic [Width-1:0] d_i,
  output logic [Width-1:0] q_o
);

  if (Depth == 0) begin : g_wire
    assign q_o = d_i;
    logic unused_clk;
    assign unused_clk = clk_i ^ rst_ni;
  end else begin : g_regs
    // One unpacked element per stage: element 0 is the newest, Depth-1 the oldest. (Verilator
    // copies narrow elements instead of shifting a wide vector; Yosys turns it into flops.)
    (* mem2reg *) logic [Width-1:0] pipe_q [Depth];
    always_ff @(posedge clk_i) begin
      if (Reset && !rst_ni) begin
        for (int unsigned i = 0; i < Depth; i++) pipe_q[i] <= '0;
      end else begin
        pipe_q[0] <= d_i;
        for (int unsigned i = 1; i < Depth; i++) pipe_q[i] <= pipe_q[i-1];
      end
    end
    assign q_o = pipe_q[Depth-1];
  end

endmodule
