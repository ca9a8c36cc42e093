// Weight-stationary systolic matrix unit, ArrayN x ArrayN PEs (tpu_pe), double-buffered weights.
//
// Activations: a row of ArrayN 16-bit elements (act_data_i bits 16k+:16) enters when act_valid_i
// is set, with its mode act_bf16_i: int8 rows use the low byte of each element, bf16 rows all 16
// bits. Element k and the mode are delayed k cycles (input skew) and enter PE row k from the
// left; they move right one PE per cycle. Partial sums enter each column from the top as 0 (+0
// in fp32) and move down one PE per cycle. Column n leaves the bottom N+n cycles after the row
// entered and is delayed N-1-n more cycles (de-skew), so one full output row of ArrayN 32-bit
// words leaves per cycle, Latency = 2*ArrayN-1 cycles after entry:
//   int8: out row (element n) = sum_k act[k] * W[k][n]               (int32, wrap-around)
//   bf16: out row (element n) = (((+0 + p_0) + p_1) + ...) + p_{N-1}, p_k = act[k] * W[k][n]
//         (fp32, one rounding per PE; docs/numerics.md)
// act_tag_i travels alongside and leaves as out_tag_o with its row. Rows of both modes may follow
// each other back to back. With EnableBf16 = 0 the array is the int8-only array (no fp logic,
// 8-bit weight registers; act_bf16_i and the upper bytes are ignored).
//
// act_swap_i (with a valid row) exchanges active and shadow weights for this row and all later
// ones. The flip travels with the row's wavefront: PE(k,n) flips exactly when element k of that
// row reaches it (cycle T+k+n for a row entering at T).
//
// Weight shift: a tile is fed as ArrayN consecutive rows on wt_valid_i/wt_data_i, tile row
// ArrayN-1 first and row 0 last (wt_data_i bits 16n+:16 = element n of the tile row: a bf16
// weight, or an int8 weight sign-extended to 16 bits). Element i of the feed (and the shift
// control) is delayed i cycles (feed skew). Without wt_transpose_i element n enters column n from
// the top and the tile shifts down the columns: PE(k,n) ends with element n of tile row k, and
// within a column the shift enable spreads down one PE per cycle, so PE(m,n) is written in cycles
// S+n+m .. S+n+N-1 for a tile fed from cycle S. With wt_transpose_i (set for all rows of a tile)
// element k enters row k from the left and the tile shifts right along the rows: PE(k,n) ends
// with element k of tile row n (W^T), and PE(k,n) is written in cycles S+k+n .. S+k+N-1. Either
// way the shift front follows the swap wavefront of the MATMUL before it. Contract for the driver of these ports
// (asserted): a tile's ArrayN rows are fed in consecutive cycles, and no swap row enters in a
// cycle in which a weight row is fed. That alone guarantees that
//   - a tile fed after a swap row (S > T) never overwrites weights the array still uses, and
//   - a swap row entering after the feed (T >= S+N) finds the whole tile in the shadow registers,
// so the shadow can be refilled one cycle after a MATMUL's first row entered, and a fold needs
// max(rows, ArrayN+1) cycles.
`include "tpu_assert.svh"

module tpu_mxu #(
  parameter int unsigned ArrayN     = 16,
  parameter int unsigned TagW       = 1,
  parameter bit          EnableBf16 = 1'b1
) (
  input  logic                   clk_i,
  input  logic                   rst_ni,
  // activation rows
  input  logic                   act_valid_i,
  input  logic                   act_swap_i,
  input  logic                   act_bf16_i,
  input  logic [16*ArrayN-1:0]   act_data_i,
  input  logic [TagW-1:0]        act_tag_i,
  // weight tile rows into the shadow registers
  input  logic                   wt_valid_i,
  input  logic                   wt_transpose_i,
  input  logic [16*ArrayN-1:0]   wt_data_i,
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
  //   act_h/bf_h/swp_h[k*(N+1)+n]: into PE(k,n) from the left (n = N: out of the last column)
  //   psum_v[k*N+n]:           into PE(k,n) from above   (k = N: out of the bottom row)
  //   wsh[k*N+n]:              shadow weight of PE(k,n): shift data for PE(k+1,n) and PE(k,n+1)
  //   wfeed[i]:                element i of the tile row fed i cycles ago (top of column i,
  //                            left of row i)
  // (mem2reg: for Yosys these are nets, not memories.)
  // The simulator's PEs carry {fp32, int32} partial sums (tpu_pe SplitPsum: no per-PE select
  // between the two); synthesis has one 32-bit partial sum per PE.
`ifdef VERILATOR
  localparam bit SplitPsum = EnableBf16;
`else
  localparam bit SplitPsum = 1'b0;
`endif
  localparam int unsigned PsumW = SplitPsum ? 64 : 32;
  (* mem2reg *) logic [15:0] act_h  [N*(N+1)];
  (* mem2reg *) logic        bf_h   [N*(N+1)];
  (* mem2reg *) logic        swp_h  [N*(N+1)];
  (* mem2reg *) logic [PsumW-1:0] psum_v [N*(N+1)];
  (* mem2reg *) logic [15:0] wsh    [N*N];
  (* mem2reg *) logic [15:0] wfeed  [N];
  (* mem2reg *) logic        wen    [N*N];
  (* mem2reg *) logic        wtr    [N*N];

  // ---------------------------------------------------------------------------------------------
  // Input skew: row k of the array sees element k (and the swap flag) k cycles late.
  // ---------------------------------------------------------------------------------------------
  logic act_swap;
  assign act_swap = act_valid_i & act_swap_i;

  for (genvar k = 0; k < N; k++) begin : g_in_skew
    if (EnableBf16) begin : g_bf16
      tpu_delay #(.Width(2), .Depth(k), .Reset(1'b1)) u_skew_ctl (
        .clk_i,
        .rst_ni,
        .d_i ({act_swap, act_bf16_i}),
        .q_o ({swp_h[k*(N+1)], bf_h[k*(N+1)]})
      );
      tpu_delay #(.Width(16), .Depth(k), .Reset(1'b0)) u_skew (
        .clk_i,
        .rst_ni,
        .d_i (act_data_i[16*k +: 16]),
        .q_o (act_h[k*(N+1)])
      );
    end else begin : g_int8
      logic [7:0] act8;
      tpu_delay #(.Width(9), .Depth(k), .Reset(1'b1)) u_skew (
        .clk_i,
        .rst_ni,
        .d_i ({act_swap, act_data_i[16*k +: 8]}),
        .q_o ({swp_h[k*(N+1)], act8})
      );
      assign act_h[k*(N+1)] = {8'd0, act8};
      assign bf_h[k*(N+1)]  = 1'b0;
    end
  end
  logic unused_act_in;
  if (EnableBf16) begin : g_act_in_used
    assign unused_act_in = 1'b0;
  end else begin : g_act_in_unused
    always_comb begin
      unused_act_in = act_bf16_i;
      for (int unsigned k = 0; k < N; k++) unused_act_in ^= ^act_data_i[16*k+8 +: 8];
    end
  end

  // ---------------------------------------------------------------------------------------------
  // Weight feed: element i of the tile row and the shift control reach column i (row i) i cycles
  // after element 0.
  // ---------------------------------------------------------------------------------------------
  logic [CntW-1:0] wcnt_q;  // index of the tile row fed this cycle (0 = WB row N-1)

  logic            tr_q;    // transpose flag of the tile being fed (for the assertion)
  always_ff @(posedge clk_i) begin
    if (!rst_ni) begin
      wcnt_q <= '0;
      tr_q   <= 1'b0;
    end else if (wt_valid_i) begin
      wcnt_q <= (wcnt_q == LastCnt) ? '0 : wcnt_q + 1'b1;
      tr_q   <= wt_transpose_i;
    end
  end

  // Feed skew: element i and the shift control reach column i (row i, transposed) i cycles late.
  logic [1+1+CntW-1:0] fctl [N];  // {valid, transpose, tile row count} of element i
  for (genvar i = 0; i < N; i++) begin : g_wfeed
    tpu_delay #(.Width(2 + CntW), .Depth(i), .Reset(1'b1)) u_wctl (
      .clk_i,
      .rst_ni,
      .d_i ({wt_valid_i, wt_transpose_i, wcnt_q}),
      .q_o (fctl[i])
    );
    tpu_delay #(.Width(EnableBf16 ? 16 : 8), .Depth(i), .Reset(1'b0)) u_wdata (
      .clk_i,
      .rst_ni,
      .d_i (wt_data_i[16*i +: (EnableBf16 ? 16 : 8)]),
      .q_o (wfeed[i][(EnableBf16 ? 16 : 8)-1:0])
    );
    if (!EnableBf16) begin : g_wfeed_hi
      assign wfeed[i][15:8] = '0;
    end
  end

  // Shift enables: down the columns, PE(m,n) once the front of column n has reached row m; along
  // the rows (transposed), PE(k,n) once the front of row k has reached column n.
  for (genvar k = 0; k < N; k++) begin : g_wen_row
    for (genvar n = 0; n < N; n++) begin : g_wen_col
      logic col_en, row_en, col_reached, row_reached;
      if (k == 0) begin : g_col_top
        assign col_reached = 1'b1;
      end else begin : g_col_below
        assign col_reached = fctl[n][CntW-1:0] >= CntW'(k);
      end
      if (n == 0) begin : g_row_left
        assign row_reached = 1'b1;
      end else begin : g_row_right
        assign row_reached = fctl[k][CntW-1:0] >= CntW'(n);
      end
      assign col_en = fctl[n][1+CntW] && !fctl[n][CntW] && col_reached;
      assign row_en = fctl[k][1+CntW] &&  fctl[k][CntW] && row_reached;
      assign wen[k*N+n] = col_en || row_en;
      assign wtr[k*N+n] = row_en;
    end
  end

  logic unused_wt_in;
  if (EnableBf16) begin : g_wt_in_used
    assign unused_wt_in = 1'b0;
  end else begin : g_wt_in_unused
    always_comb begin
      unused_wt_in = 1'b0;
      for (int unsigned i = 0; i < N; i++) unused_wt_in ^= ^wt_data_i[16*i+8 +: 8];
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
      tpu_pe #(.EnableBf16(EnableBf16), .SplitPsum(SplitPsum)) u_pe (
        .clk_i,
        .rst_ni,
        .act_i         (act_h[k*(N+1)+n]),
        .bf16_i        (bf_h[k*(N+1)+n]),
        .swap_i        (swp_h[k*(N+1)+n]),
        .act_o         (act_h[k*(N+1)+n+1]),
        .bf16_o        (bf_h[k*(N+1)+n+1]),
        .swap_o        (swp_h[k*(N+1)+n+1]),
        .psum_i        (psum_v[k*N+n]),
        .psum_o        (psum_v[(k+1)*N+n]),
        .wshift_en_i   (wen[k*N+n]),
        .wshift_tr_i   (wtr[k*N+n]),
        .wshift_up_i   ((k == 0) ? wfeed[n] : wsh[(k-1)*N+n]),
        .wshift_left_i ((n == 0) ? wfeed[k] : wsh[k*N+n-1]),
        .wshadow_o     (wsh[k*N+n])
      );
    end
  end

  // The last column's activations and the bottom-right shadow weight leave the array unused.
  logic unused_edge;
  always_comb begin
    unused_edge = ^wsh[N*N-1];
    for (int unsigned k = 0; k < N; k++) begin
      unused_edge = unused_edge ^ (^act_h[k*(N+1)+N]) ^ swp_h[k*(N+1)+N] ^ bf_h[k*(N+1)+N];
    end
  end

  // ---------------------------------------------------------------------------------------------
  // Output de-skew: column n leaves the bottom N+n cycles after entry; delay it N-1-n more.
  // ---------------------------------------------------------------------------------------------
  for (genvar n = 0; n < N; n++) begin : g_deskew
    logic [31:0] col;
    if (SplitPsum) begin : g_split
      // the sum of the mode of the row leaving the bottom PE (its bf16_o)
      assign col = bf_h[(N-1)*(N+1)+n+1] ? psum_v[N*N+n][63:32] : psum_v[N*N+n][31:0];
    end else begin : g_one
      assign col = psum_v[N*N+n][31:0];
    end
    tpu_delay #(.Width(32), .Depth(N - 1 - n), .Reset(1'b0)) u_deskew (
      .clk_i,
      .rst_ni,
      .d_i (col),
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
    for (int unsigned i = 0; i < N; i++) wshift_busy = wshift_busy | fctl[i][1+CntW];
  end
  assign busy_o = (|vld_q) | wt_valid_i | wshift_busy;

  // ---------------------------------------------------------------------------------------------
  // Assertions
  // ---------------------------------------------------------------------------------------------
  `TPU_ASSERT_INIT(ArrayNMin_A, ArrayN >= 2)
  // A tile's rows are fed back to back.
  `TPU_ASSERT(WtFeedContiguous_A, (wcnt_q == '0) || wt_valid_i, clk_i, !rst_ni)
  // A tile is transposed or not as a whole.
  `TPU_ASSERT(WtTransposeStable_A, (wcnt_q == '0) || !wt_valid_i || (wt_transpose_i == tr_q),
              clk_i, !rst_ni)
  // No swap row enters while a tile is being fed (this is what makes the overlap safe).
  `TPU_ASSERT_NEVER(SwapDuringFeed_A, act_swap && wt_valid_i, clk_i, !rst_ni)
  `TPU_ASSERT_KNOWN(OutValidKnown_A, out_valid_o, clk_i, !rst_ni)

endmodule
