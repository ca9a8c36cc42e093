// Weight-stationary systolic matrix unit, ArrayN x ArrayN PEs (tpu_pe), double-buffered weights.
//
// Activations: a row of ArrayN int8 enters when act_valid_i is set. Element k is delayed k cycles
// (input skew) and enters PE row k from the left; it moves right one PE per cycle. Partial sums
// enter each column from the top as 0 and move down one PE per cycle. Column n leaves the bottom
// N+n cycles after the row entered and is delayed N-1-n more cycles (de-skew), so one full output
// row of ArrayN int32 leaves per cycle:
//   out row (element n) = sum_k act[k] * W[k][n],   Latency = 2*ArrayN-1 cycles after entry.
// act_tag_i travels alongside and leaves as out_tag_o with its row.
//
// act_swap_i (with a valid row) exchanges active and shadow weights for this row and all later
// ones. The flip travels with the row's wavefront: PE(k,n) flips exactly when element k of that
// row reaches it (cycle T+k+n for a row entering at T).
//
// Weight shift: a tile is fed as ArrayN consecutive rows on wt_valid_i/wt_data_i, WB row ArrayN-1
// of the tile first and row 0 last (wt_data_i byte n = W[k][n]). Column n is fed n cycles after
// column 0 (column skew), and within a column the shift enable spreads down one PE per cycle,
// so the shift front follows the swap wavefront of the MATMUL before it: PE(m,n) is written in
// cycles S+n+m .. S+n+N-1 for a tile fed from cycle S. Contract for the driver of these ports
// (asserted): a tile's ArrayN rows are fed in consecutive cycles, and no swap row enters in a
// cycle in which a weight row is fed. That alone guarantees that
//   - a tile fed after a swap row (S > T) never overwrites weights the array still uses, and
//   - a swap row entering after the feed (T >= S+N) finds the whole tile in the shadow registers,
// so the shadow can be refilled one cycle after a MATMUL's first row entered, and a fold needs
// max(rows, ArrayN+1) cycles.
`include "tpu_assert.svh"

module tpu_mxu #(
  parameter int unsigned ArrayN = 16,
  parameter int unsigned TagW   = 1
) (
  input  logic                   clk_i,
  input  logic                   rst_ni,
  // activation rows
  input  logic                   act_valid_i,
  input  logic                   act_swap_i,
  input  logic [8*ArrayN-1:0]    act_data_i,
  input  logic [TagW-1:0]        act_tag_i,
  // weight tile rows into the shadow registers
  input  logic                   wt_valid_i,
  input  logic [8*ArrayN-1:0]    wt_data_i,
  // result rows
  output logic                   out_valid_o,
  output logic [32*ArrayN-1:0]   out_data_o,
  output logic [TagW-1:0]        out_tag_o,
  // a row or a weight shift is still in flight
  output logic                   busy_o
);

  localparam int unsigned N       = ArrayN;
  localparam int unsigned Latency = 2 * ArrayN - 1;
  localparam int unsigned CntW    = $clog2(ArrayN);
  localparam logic [CntW-1:0] LastCnt = CntW'(ArrayN - 1);

  // Link nets between PEs, one element per link (one-dimensional unpacked arrays: Verilator keeps
  // every link a narrow variable; wide flat vectors would cost it whole-vector copies per cycle).
  //   act_h/swp_h[k*(N+1)+n]: into PE(k,n) from the left (n = N: out of the last column)
  //   psum_v[k*N+n]:           into PE(k,n) from above   (k = N: out of the bottom row)
  //   wsh_v[k*N+n]:            shift data into PE(k,n)   (k = 0: column feed)
  // (mem2reg: for Yosys these are nets, not memories.)
  (* mem2reg *) logic [7:0]  act_h  [N*(N+1)];
  (* mem2reg *) logic        swp_h  [N*(N+1)];
  (* mem2reg *) logic [31:0] psum_v [N*(N+1)];
  (* mem2reg *) logic [7:0]  wsh_v  [N*(N+1)];
  (* mem2reg *) logic        wen    [N*N];

  // ---------------------------------------------------------------------------------------------
  // Input skew: row k of the array sees element k (and the swap flag) k cycles late.
  // ---------------------------------------------------------------------------------------------
  logic act_swap;
  assign act_swap = act_valid_i & act_swap_i;

  for (genvar k = 0; k < N; k++) begin : g_in_skew
    tpu_delay #(.Width(9), .Depth(k), .Reset(1'b1)) u_skew (
      .clk_i,
      .rst_ni,
      .d_i ({act_swap, act_data_i[8*k +: 8]}),
      .q_o ({swp_h[k*(N+1)], act_h[k*(N+1)]})
    );
  end

  // ---------------------------------------------------------------------------------------------
  // Weight feed: column n gets its byte and the shift control n cycles after column 0.
  // ---------------------------------------------------------------------------------------------
  logic [CntW-1:0] wcnt_q;  // index of the tile row fed this cycle (0 = WB row N-1)

  always_ff @(posedge clk_i) begin
    if (!rst_ni) begin
      wcnt_q <= '0;
    end else if (wt_valid_i) begin
      wcnt_q <= (wcnt_q == LastCnt) ? '0 : wcnt_q + 1'b1;
    end
  end

  for (genvar n = 0; n < N; n++) begin : g_wcol
    logic            col_valid;
    logic [CntW-1:0] col_cnt;

    tpu_delay #(.Width(1 + CntW), .Depth(n), .Reset(1'b1)) u_wctl (
      .clk_i,
      .rst_ni,
      .d_i ({wt_valid_i, wcnt_q}),
      .q_o ({col_valid, col_cnt})
    );
    tpu_delay #(.Width(8), .Depth(n), .Reset(1'b0)) u_wdata (
      .clk_i,
      .rst_ni,
      .d_i (wt_data_i[8*n +: 8]),
      .q_o (wsh_v[n])
    );
    // PE(m,n) shifts once the front of the tile has reached it (col_cnt >= m).
    assign wen[n] = col_valid;
    for (genvar m = 1; m < N; m++) begin : g_wen
      assign wen[m*N+n] = col_valid && (col_cnt >= CntW'(m));
    end
  end

  // ---------------------------------------------------------------------------------------------
  // PE array
  // ---------------------------------------------------------------------------------------------
  for (genvar n = 0; n < N; n++) begin : g_top
    assign psum_v[n] = '0;  // partial sums enter the top row as 0
  end

  for (genvar k = 0; k < N; k++) begin : g_row
    for (genvar n = 0; n < N; n++) begin : g_col
      tpu_pe u_pe (
        .clk_i,
        .rst_ni,
        .act_i       (act_h[k*(N+1)+n]),
        .swap_i      (swp_h[k*(N+1)+n]),
        .act_o       (act_h[k*(N+1)+n+1]),
        .swap_o      (swp_h[k*(N+1)+n+1]),
        .psum_i      (psum_v[k*N+n]),
        .psum_o      (psum_v[(k+1)*N+n]),
        .wshift_en_i (wen[k*N+n]),
        .wshift_i    (wsh_v[k*N+n]),
        .wshadow_o   (wsh_v[(k+1)*N+n])
      );
    end
  end

  // The last column's activations and the bottom row's shadow weights leave the array unused.
  logic unused_edge;
  always_comb begin
    unused_edge = 1'b0;
    for (int unsigned k = 0; k < N; k++) begin
      unused_edge = unused_edge ^ (^act_h[k*(N+1)+N]) ^ swp_h[k*(N+1)+N] ^ (^wsh_v[N*N+k]);
    end
  end

  // ---------------------------------------------------------------------------------------------
  // Output de-skew: column n leaves the bottom N+n cycles after entry; delay it N-1-n more.
  // ---------------------------------------------------------------------------------------------
  for (genvar n = 0; n < N; n++) begin : g_deskew
    tpu_delay #(.Width(32), .Depth(N - 1 - n), .Reset(1'b0)) u_deskew (
      .clk_i,
      .rst_ni,
      .d_i (psum_v[N*N+n]),
      .q_o (out_data_o[32*n +: 32])
    );
  end

  // Valid and tag pipelines: Latency cycles, in step with the rows.
  logic [Latency-1:0] vld_q;
  always_ff @(posedge clk_i) begin
    if (!rst_ni) vld_q <= '0;
    else         vld_q <= {vld_q[Latency-2:0], act_valid_i};
  end
  assign out_valid_o = vld_q[Latency-1];

  tpu_delay #(.Width(TagW), .Depth(Latency), .Reset(1'b0)) u_tag (
    .clk_i,
    .rst_ni,
    .d_i (act_tag_i),
    .q_o (out_tag_o)
  );

  // Weight shift still spreading through the column skew.
  logic wshift_busy;
  always_comb begin
    wshift_busy = 1'b0;
    for (int unsigned n = 0; n < N; n++) wshift_busy = wshift_busy | wen[n];
  end
  assign busy_o = (|vld_q) | wt_valid_i | wshift_busy;

  // ---------------------------------------------------------------------------------------------
  // Assertions
  // ---------------------------------------------------------------------------------------------
  `TPU_ASSERT_INIT(ArrayNMin_A, ArrayN >= 2)
  // A tile's rows are fed back to back.
  `TPU_ASSERT(WtFeedContiguous_A, (wcnt_q == '0) || wt_valid_i, clk_i, !rst_ni)
  // No swap row enters while a tile is being fed (this is what makes the overlap safe).
  `TPU_ASSERT_NEVER(SwapDuringFeed_A, act_swap && wt_valid_i, clk_i, !rst_ni)
  `TPU_ASSERT_KNOWN(OutValidKnown_A, out_valid_o, clk_i, !rst_ni)

endmodule
