// Vector unit (VECTOR, docs/isa.md "VECTOR operations", docs/numerics.md): ArrayN fp32 lanes,
// one ACC row per cycle. For i in 0 .. rows-1: ACC[dst+i] = op(ACC[a+i], ACC[b+i], scalar);
// COLSUM instead sums the rows of a from +0 in row order and writes one row, dst, at the end.
//
// Pipeline (one row enters per cycle):
//   R  read ACC row a+i on port A and (ops that read b) row b+i on port B;
//   P  the rows arrive; the lanes form m = a * (MUL ? b : scalar) and keep a, b;
//   W  the lanes form the result (ADD/SUB/AXPY/COLSUM through the one adder per lane; IMAX, ISA 1.3,
//      a signed 32-bit compare);
//   O  ACC row dst+i is written (COLSUM: its running sum, written with the last row).
// go_i at cycle 0; reads in cycles 1 .. rows; the write of row i three cycles after its read;
// done_o pulses with the last write, rows + 3 cycles after go_i; busy_o is high from the cycle
// after go_i through done_o (rows + 3 cycles); the next aux instruction can go the cycle after. A destination range equal to a source range is safe (row i is read before it
// is written); the compute engine dispatches VECTOR only with no MATMUL result outstanding and no
// ACTIVATE in flight, and holds those back while busy_o (the unit owns the engine-side ACC
// ports meanwhile).
// The lane arithmetic lives in clocked blocks under the stage enables (tpu_fp_pkg functions):
// an idle unit evaluates no floating-point logic in simulation.
`include "tpu_assert.svh"

module tpu_vpu #(
  parameter int unsigned ArrayN   = 16,
  parameter int unsigned AccDepth = 4096,
  localparam int unsigned AccAw   = $clog2(AccDepth)
) (
  input  logic                  clk_i,
  input  logic                  rst_ni,
  // the VECTOR being dispatched (fields validated by the decoder)
  input  logic                  go_i,
  input  logic [3:0]            op_i,     // tpu_isa_pkg::vop_e
  input  logic [AccAw-1:0]      dst_i,
  input  logic [AccAw-1:0]      a_i,
  input  logic [AccAw-1:0]      b_i,
  input  logic [15:0]           rows_i,
  input  logic [31:0]           scalar_i,
  // ACC read ports (data the cycle after the read)
  output logic                  a_rd_en_o,
  output logic [AccAw-1:0]      a_rd_addr_o,
  input  logic [32*ArrayN-1:0]  a_rd_data_i,
  output logic                  b_rd_en_o,
  output logic [AccAw-1:0]      b_rd_addr_o,
  input  logic [32*ArrayN-1:0]  b_rd_data_i,
  // ACC write port
  output logic                  wr_en_o,
  output logic [AccAw-1:0]      wr_addr_o,
  output logic [32*ArrayN-1:0]  wr_data_o,
  output logic                  busy_o,
  output logic                  done_o
);

  localparam int unsigned N = ArrayN;

  localparam logic [3:0] VAdd    = 4'(tpu_isa_pkg::VopAdd);
  localparam logic [3:0] VSub    = 4'(tpu_isa_pkg::VopSub);
  localparam logic [3:0] VMul    = 4'(tpu_isa_pkg::VopMul);
  localparam logic [3:0] VAxpy   = 4'(tpu_isa_pkg::VopAxpy);
  localparam logic [3:0] VScale  = 4'(tpu_isa_pkg::VopScale);
  localparam logic [3:0] VMax    = 4'(tpu_isa_pkg::VopMax);
  localparam logic [3:0] VMaxs   = 4'(tpu_isa_pkg::VopMaxs);
  localparam logic [3:0] VSelect = 4'(tpu_isa_pkg::VopSelect);
  localparam logic [3:0] VColsum = 4'(tpu_isa_pkg::VopColsum);
  localparam logic [3:0] VRound  = 4'(tpu_isa_pkg::VopRoundBf16);
  localparam logic [3:0] VImax   = 4'(tpu_isa_pkg::VopImax);

  // Rule 1 on an operand.
  function automatic logic [31:0] ftz(input logic [31:0] x);
    ftz = (x[30:23] == 8'd0) ? {x[31], 31'd0} : x;
  endfunction
  function automatic logic is_nan(input logic [30:0] x);
    is_nan = (x[30:23] == 8'hFF) && (x[22:0] != '0);
  endfunction
  // x > y for flushed, non-NaN x and y (IEEE: +0 and -0 compare equal).
  function automatic logic gt(input logic [31:0] x, input logic [31:0] y);
    if ((x[30:0] == '0) && (y[30:0] == '0)) gt = 1'b0;
    else if (x[31] != y[31])                gt = !x[31];
    else if (!x[31])                        gt = x[30:0] > y[30:0];
    else                                    gt = x[30:0] < y[30:0];
  endfunction
  // MAX / MAXS: canonical NaN if either is NaN, else x > y ? x : y (flushed operands).
  function automatic logic [31:0] vmax(input logic [31:0] x, input logic [31:0] y);
    logic [31:0] xf, yf;
    xf = ftz(x);
    yf = ftz(y);
    if (is_nan(xf[30:0]) || is_nan(yf[30:0])) vmax = 32'h7FC0_0000;
    else                          vmax = gt(xf, yf) ? xf : yf;
  endfunction
  // SELECT: +0 if a <= 0 (a NaN selects b), else b flushed and canonical.
  function automatic logic [31:0] vselect(input logic [31:0] x, input logic [31:0] y);
    logic [31:0] xf;
    xf = ftz(x);
    if (!is_nan(xf[30:0]) && (xf[31] || xf[30:0] == '0)) vselect = 32'd0;
    else if (is_nan(y[30:0]))                             vselect = 32'h7FC0_0000;
    else                                            vselect = ftz(y);
  endfunction

  function automatic logic reads_b(input logic [3:0] op);
    reads_b = (op == VAdd) || (op == VSub) || (op == VMul) || (op == VAxpy) ||
              (op == VMax) || (op == VSelect) || (op == VImax);
  endfunction

  // ---------------------------------------------------------------------------------------------
  // R: read sequencer
  // ---------------------------------------------------------------------------------------------
  logic             rd_busy_q;
  logic [3:0]       op_q;
  logic [31:0]      scalar_q;
  logic [AccAw-1:0] ra_q, rb_q, rd_dst_q;
  logic [15:0]      left_q;
  logic             rd_last;
  logic             run_q;     // from go_i to done_o

  assign rd_last = rd_busy_q && (left_q == 16'd1);

  always_ff @(posedge clk_i) begin
    if (!rst_ni) begin
      rd_busy_q <= 1'b0;
      run_q     <= 1'b0;
    end else begin
      if (go_i)         rd_busy_q <= 1'b1;
      else if (rd_last) rd_busy_q <= 1'b0;
      if (go_i)         run_q <= 1'b1;
      else if (done_o)  run_q <= 1'b0;
    end
  end

  always_ff @(posedge clk_i) begin
    if (go_i) begin
      op_q     <= op_i;
      scalar_q <= scalar_i;
      ra_q     <= a_i;
      rb_q     <= b_i;
      rd_dst_q <= dst_i;
      left_q   <= rows_i;
    end else if (rd_busy_q) begin
      ra_q     <= ra_q + 1'b1;
      rb_q     <= rb_q + 1'b1;
      rd_dst_q <= (op_q == VColsum) ? rd_dst_q : rd_dst_q + 1'b1;
      left_q   <= left_q - 16'd1;
    end
  end

  assign a_rd_en_o   = rd_busy_q;
  assign a_rd_addr_o = ra_q;
  assign b_rd_en_o   = rd_busy_q && reads_b(op_q);
  assign b_rd_addr_o = rb_q;

  // ---------------------------------------------------------------------------------------------
  // P: operands arrive; products
  // ---------------------------------------------------------------------------------------------
  logic             p_valid_q, p_last_q;
  logic [AccAw-1:0] p_dst_q;

  always_ff @(posedge clk_i) begin
    if (!rst_ni) p_valid_q <= 1'b0;
    else         p_valid_q <= rd_busy_q;
  end
  always_ff @(posedge clk_i) begin
    if (rd_busy_q) begin
      p_last_q <= rd_last;
      p_dst_q  <= rd_dst_q;
    end
  end

  logic             w_valid_q, w_last_q;
  logic [AccAw-1:0] w_dst_q;
  logic [32*N-1:0]  w_a_q, w_b_q, w_m_q;

  always_ff @(posedge clk_i) begin
    if (!rst_ni) w_valid_q <= 1'b0;
    else         w_valid_q <= p_valid_q;
  end
  always_ff @(posedge clk_i) begin
    if (p_valid_q) begin
      w_last_q <= p_last_q;
      w_dst_q  <= p_dst_q;
      w_a_q    <= a_rd_data_i;
      w_b_q    <= reads_b(op_q) ? b_rd_data_i : '0;
      for (int unsigned j = 0; j < N; j++) begin
        if (op_q == VMul || op_q == VAxpy || op_q == VScale) begin
          w_m_q[32*j +: 32] <= tpu_fp_pkg::fp32_mul(a_rd_data_i[32*j +: 32],
                                                         (op_q == VMul) ? b_rd_data_i[32*j +: 32] : scalar_q);
        end
      end
    end
  end

  // ---------------------------------------------------------------------------------------------
  // W: results, ACC write (registered: written the cycle after W)
  // ---------------------------------------------------------------------------------------------
  logic [32*N-1:0]  sum_q;       // COLSUM running sum
  logic             o_valid_q, o_last_q;
  logic [AccAw-1:0] o_dst_q;
  logic [32*N-1:0]  o_data_q;

  always_ff @(posedge clk_i) begin
    if (!rst_ni) begin
      o_valid_q <= 1'b0;
      o_last_q  <= 1'b0;
    end else begin
      o_valid_q <= w_valid_q && ((op_q != VColsum) || w_last_q);
      o_last_q  <= w_valid_q && w_last_q;
    end
  end

  always_ff @(posedge clk_i) begin
    if (go_i) sum_q <= '0;  // COLSUM starts from +0
    if (w_valid_q) begin
      o_dst_q <= w_dst_q;
      for (int unsigned j = 0; j < N; j++) begin
        logic [31:0] a, b, m, r, x, y, sum, mx;
        a = w_a_q[32*j +: 32];
        b = w_b_q[32*j +: 32];
        m = w_m_q[32*j +: 32];
        // One adder and one max per lane, their operands chosen by the op.
        case (op_q)
          VSub:    begin x = a;                 y = {~b[31], b[30:0]}; end
          VAxpy:   begin x = m;                 y = b;                 end
          VColsum: begin x = sum_q[32*j +: 32]; y = a;                 end
          default: begin x = a;                 y = b;                 end
        endcase
        sum = tpu_fp_pkg::fp32_add(x, y);
        mx  = vmax(a, (op_q == VMaxs) ? scalar_q : b);
        case (op_q)
          VAdd, VSub, VAxpy, VColsum: r = sum;
          VMul, VScale:               r = m;
          VMax, VMaxs:                r = mx;
          VSelect:                    r = vselect(a, b);
          VRound:                     r = {tpu_fp_pkg::fp32_to_bf16(a), 16'd0};
          VImax:                      r = ($signed(a) > $signed(b)) ? a : b;
          default:                    r = 32'h7FC0_0000;
        endcase
        o_data_q[32*j +: 32] <= r;
        if (op_q == VColsum) sum_q[32*j +: 32] <= r;
      end
    end
  end

  assign wr_en_o   = o_valid_q;
  assign wr_addr_o = o_dst_q;
  assign wr_data_o = o_data_q;
  assign done_o    = o_last_q;
  assign busy_o    = run_q;

  `TPU_ASSERT(VpuRows_A, !go_i || rows_i != '0, clk_i, !rst_ni)
  `TPU_ASSERT(VpuGoIdle_A, !go_i || !run_q, clk_i, !rst_ni)
  `TPU_ASSERT(VpuOp_A, !go_i || op_i <= VImax, clk_i, !rst_ni)

endmodule
