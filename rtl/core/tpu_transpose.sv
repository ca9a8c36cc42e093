// Transpose unit (TRANSPOSE, docs/isa.md): reads `rows` (1 .. ArrayN) source tile rows from the
// UB into an ArrayN x ArrayN buffer, then writes ArrayN destination rows, dst[j][i] = src[i][j],
// zeros for i >= rows. int8: one UB row per tile row (the low 8N bits of the engine port); bf16:
// a UB row pair per tile row, moved in one cycle by the engine port's pair access (tpu_ram_pair:
// {row 2r+1, row 2r}, element n at bits 16n +: 16).
//
// Timing (both modes): go_i at cycle 0; UB reads in cycles 1 .. rows, each tile row captured the
// cycle after its read; one empty cycle; UB writes in cycles rows+2 .. rows+1+N. done_o pulses
// with the last write; busy_o is high from the cycle after go_i through done_o (rows + N + 1
// cycles); the next aux instruction can go the cycle after done_o. Every read comes before the
// first write, so the source and destination ranges may overlap.
// The compute engine dispatches TRANSPOSE only while no MATMUL reads and no ACTIVATE writes the
// UB, and holds those back while busy_o: the unit owns both engine-side UB ports meanwhile.
`include "tpu_assert.svh"

module tpu_transpose #(
  parameter int unsigned ArrayN  = 16,
  parameter int unsigned UbDepth = 32768,
  localparam int unsigned UbAw   = $clog2(UbDepth)
) (
  input  logic                clk_i,
  input  logic                rst_ni,
  // the TRANSPOSE being dispatched (addresses validated by the decoder; bf16: even)
  input  logic                go_i,
  input  logic [UbAw-1:0]     src_i,
  input  logic [UbAw-1:0]     dst_i,
  input  logic [15:0]         rows_i,   // 1 .. ArrayN
  input  logic                bf16_i,
  // UB engine ports (read data the cycle after the read); ub_pair_o: both are row pair accesses
  output logic                 ub_rd_en_o,
  output logic [UbAw-1:0]      ub_rd_addr_o,
  input  logic [16*ArrayN-1:0] ub_rd_data_i,
  output logic                 ub_wr_en_o,
  output logic [UbAw-1:0]      ub_wr_addr_o,
  output logic [16*ArrayN-1:0] ub_wr_data_o,
  output logic                 ub_pair_o,
  output logic                busy_o,
  output logic                done_o
);

  localparam int unsigned N     = ArrayN;
  localparam int unsigned CntW  = $clog2(ArrayN) + 1;  // counts 0 .. N
  localparam int unsigned IdxW  = $clog2(ArrayN);

  typedef enum logic [1:0] {TrIdle, TrRead, TrGap, TrWrite} tr_st_e;

  tr_st_e           st_q;
  logic             bf16_q;
  logic [UbAw-1:0]  rd_addr_q, wr_addr_q;
  logic [CntW-1:0]  rd_left_q, wr_left_q;
  logic             cap_q;            // UB read data is a source tile row this cycle
  logic [IdxW-1:0]  cap_idx_q;        // which tile row
  logic [15:0]      rows_q;
  logic [IdxW-1:0]  wr_idx_q;         // destination tile row being written

  // Tile buffer: element (i, j) of source tile row i, 16 bits (int8 elements in the low byte).
  logic [16*N-1:0]  buf_q [N];

  logic rd_last, wr_last;
  assign rd_last = (st_q == TrRead) && (rd_left_q == CntW'(1));
  assign wr_last = (st_q == TrWrite) && (wr_left_q == CntW'(1));

  always_ff @(posedge clk_i) begin
    if (!rst_ni) begin
      st_q  <= TrIdle;
      cap_q <= 1'b0;
    end else begin
      cap_q <= (st_q == TrRead);
      case (st_q)
        TrIdle:  if (go_i) st_q <= TrRead;
        TrRead:  if (rd_last) st_q <= TrGap;
        TrGap:   st_q <= TrWrite;
        TrWrite: if (wr_last) st_q <= TrIdle;
        default: st_q <= TrIdle;
      endcase
    end
  end

  always_ff @(posedge clk_i) begin
    if (go_i) begin
      bf16_q    <= bf16_i;
      rows_q    <= rows_i;
      rd_addr_q <= src_i;
      wr_addr_q <= dst_i;
      rd_left_q <= CntW'(rows_i[IdxW:0]);
      wr_left_q <= CntW'(N);
      cap_idx_q <= '0;
      wr_idx_q  <= '0;
    end else begin
      if (st_q == TrRead) begin
        rd_addr_q <= rd_addr_q + (bf16_q ? UbAw'(2) : UbAw'(1));
        rd_left_q <= rd_left_q - 1'b1;
      end
      if (cap_q) cap_idx_q <= cap_idx_q + 1'b1;
      if (st_q == TrWrite) begin
        wr_addr_q <= wr_addr_q + (bf16_q ? UbAw'(2) : UbAw'(1));
        wr_left_q <= wr_left_q - 1'b1;
        wr_idx_q  <= wr_idx_q + 1'b1;
      end
    end
  end

  // Capture: tile row i, element j = byte j (int8) or bits 16j +: 16 of the pair (bf16).
  always_ff @(posedge clk_i) begin
    if (cap_q) begin
      for (int unsigned j = 0; j < N; j++) begin
        buf_q[cap_idx_q][16*j +: 16] <= bf16_q ? ub_rd_data_i[16*j +: 16]
                                               : {8'd0, ub_rd_data_i[8*j +: 8]};
      end
    end
  end

  // Write data: destination tile row j holds column j of the buffer; rows >= rows_q are zero.
  always_comb begin
    ub_wr_data_o = '0;
    for (int unsigned i = 0; i < N; i++) begin
      if (16'(i) < rows_q) begin
        if (bf16_q) ub_wr_data_o[16*i +: 16] = buf_q[i][16*wr_idx_q +: 16];
        else        ub_wr_data_o[8*i +: 8]   = buf_q[i][16*wr_idx_q +: 8];
      end
    end
  end

  assign ub_rd_en_o   = (st_q == TrRead);
  assign ub_rd_addr_o = rd_addr_q;
  assign ub_wr_en_o   = (st_q == TrWrite);
  assign ub_wr_addr_o = wr_addr_q;
  assign ub_pair_o    = bf16_q;
  assign busy_o       = (st_q != TrIdle);
  assign done_o       = wr_last;

  `TPU_ASSERT_INIT(TransposeN_A, ArrayN >= 2 && (ArrayN & (ArrayN - 1)) == 0)
  `TPU_ASSERT(TransposeRows_A, !go_i || (rows_i != '0 && rows_i <= 16'(ArrayN)), clk_i, !rst_ni)
  `TPU_ASSERT(TransposeGoIdle_A, !go_i || st_q == TrIdle, clk_i, !rst_ni)

endmodule
