// A row memory (UB or WB) whose engine port can also move a row pair (2r, 2r+1) per cycle, for
// the bf16 modes (a bf16 row of ArrayN elements is a row pair, docs/numerics.md).
//
// Pairs = 1: the rows are banked by parity, bank 0 holding the even rows and bank 1 the odd rows
// (Depth/2 rows each). A single-row access goes to one bank; a pair access (address even) reads or
// writes row 2r in bank 0 and row 2r+1 in bank 1 at bank row r, in the same cycle. Engine data is
// 2*Width bits: a pair is {row 2r+1, row 2r} (so bf16 element n sits at bits 16n+:16); a single
// row is in the low Width bits (read: upper half zero; write: upper half ignored).
// Pairs = 0 (EnableBf16 = 0): one memory of Depth rows, exactly the int8-only build; the pair
// inputs must stay low.
// Shared = 0: each bank is a tpu_ram_2r2w, the engine on port 0 and the DMA on port 1.
// Shared = 1 (FPGA block RAM): each bank is a tpu_ram_1r1w whose ports the engine and the DMA
// share; the caller never lets both access the memory in the same cycle (tpu_datapath holds the
// DMA off while the engine uses it). Read data follows one cycle after the request, as in the
// memories themselves; each side looks at it only the cycle after its own read.
`include "tpu_assert.svh"

module tpu_ram_pair #(
  parameter int unsigned Width  = 32,
  parameter int unsigned Depth  = 16,
  parameter bit          Pairs  = 1'b1,
  parameter bit          Shared = 1'b0,
  localparam int unsigned Aw = $clog2(Depth)
) (
  input  logic               clk_i,
  input  logic               rst_ni,
  // engine port
  input  logic               e_rd_en_i,
  input  logic [Aw-1:0]      e_rd_addr_i,
  input  logic               e_rd_pair_i,
  output logic [2*Width-1:0] e_rd_data_o,
  input  logic               e_wr_en_i,
  input  logic [Aw-1:0]      e_wr_addr_i,
  input  logic               e_wr_pair_i,
  input  logic [2*Width-1:0] e_wr_data_i,
  // DMA port (single rows)
  input  logic               d_rd_en_i,
  input  logic [Aw-1:0]      d_rd_addr_i,
  output logic [Width-1:0]   d_rd_data_o,
  input  logic               d_wr_en_i,
  input  logic [Aw-1:0]      d_wr_addr_i,
  input  logic [Width-1:0]   d_wr_data_i
);

  if (!Pairs) begin : g_single
    logic [Width-1:0] e_q;
    if (Shared) begin : g_shared
      logic [Width-1:0] q;
      tpu_ram_1r1w #(.Width(Width), .Depth(Depth)) u_ram (
        .clk_i, .rst_ni,
        .rd_en_i   (e_rd_en_i || d_rd_en_i),
        .rd_addr_i (e_rd_en_i ? e_rd_addr_i : d_rd_addr_i),
        .rd_data_o (q),
        .wr_en_i   (e_wr_en_i || d_wr_en_i),
        .wr_addr_i (e_wr_en_i ? e_wr_addr_i : d_wr_addr_i),
        .wr_data_i (e_wr_en_i ? e_wr_data_i[Width-1:0] : d_wr_data_i)
      );
      assign e_q         = q;
      assign d_rd_data_o = q;
    end else begin : g_2r2w
      tpu_ram_2r2w #(.Width(Width), .Depth(Depth)) u_ram (
        .clk_i, .rst_ni,
        .rd0_en_i (e_rd_en_i), .rd0_addr_i (e_rd_addr_i), .rd0_data_o (e_q),
        .rd1_en_i (d_rd_en_i), .rd1_addr_i (d_rd_addr_i), .rd1_data_o (d_rd_data_o),
        .wr0_en_i (e_wr_en_i), .wr0_addr_i (e_wr_addr_i), .wr0_data_i (e_wr_data_i[Width-1:0]),
        .wr1_en_i (d_wr_en_i), .wr1_addr_i (d_wr_addr_i), .wr1_data_i (d_wr_data_i)
      );
    end
    assign e_rd_data_o = {{Width{1'b0}}, e_q};
    logic unused_pair;
    assign unused_pair = ^{e_rd_pair_i, e_wr_pair_i, e_wr_data_i[2*Width-1:Width]};
    `TPU_ASSERT_NEVER(NoPairs_A, (e_rd_en_i && e_rd_pair_i) || (e_wr_en_i && e_wr_pair_i),
                      clk_i, !rst_ni)
  end else begin : g_banked
    localparam int unsigned BankDepth = Depth / 2;
    logic [Width-1:0] e_q [2];
    logic [Width-1:0] d_q [2];
    logic             e_sel_q, e_pair_q, d_sel_q;

    for (genvar b = 0; b < 2; b++) begin : g_bank
      logic             e_rd, e_wr, d_rd, d_wr;
      logic [Width-1:0] e_wdata;
      assign e_rd    = e_rd_en_i && (e_rd_pair_i || (e_rd_addr_i[0] == 1'(b)));
      assign e_wr    = e_wr_en_i && (e_wr_pair_i || (e_wr_addr_i[0] == 1'(b)));
      assign d_rd    = d_rd_en_i && (d_rd_addr_i[0] == 1'(b));
      assign d_wr    = d_wr_en_i && (d_wr_addr_i[0] == 1'(b));
      assign e_wdata = e_wr_pair_i ? e_wr_data_i[Width*b +: Width] : e_wr_data_i[Width-1:0];
      if (Shared) begin : g_shared
        logic [Width-1:0] q;
        tpu_ram_1r1w #(.Width(Width), .Depth(BankDepth)) u_ram (
          .clk_i, .rst_ni,
          .rd_en_i   (e_rd || d_rd),
          .rd_addr_i (e_rd ? e_rd_addr_i[Aw-1:1] : d_rd_addr_i[Aw-1:1]),
          .rd_data_o (q),
          .wr_en_i   (e_wr || d_wr),
          .wr_addr_i (e_wr ? e_wr_addr_i[Aw-1:1] : d_wr_addr_i[Aw-1:1]),
          .wr_data_i (e_wr ? e_wdata : d_wr_data_i)
        );
        assign e_q[b] = q;
        assign d_q[b] = q;
      end else begin : g_2r2w
        tpu_ram_2r2w #(.Width(Width), .Depth(BankDepth)) u_ram (
          .clk_i, .rst_ni,
          .rd0_en_i (e_rd), .rd0_addr_i (e_rd_addr_i[Aw-1:1]), .rd0_data_o (e_q[b]),
          .rd1_en_i (d_rd), .rd1_addr_i (d_rd_addr_i[Aw-1:1]), .rd1_data_o (d_q[b]),
          .wr0_en_i (e_wr), .wr0_addr_i (e_wr_addr_i[Aw-1:1]), .wr0_data_i (e_wdata),
          .wr1_en_i (d_wr), .wr1_addr_i (d_wr_addr_i[Aw-1:1]), .wr1_data_i (d_wr_data_i)
        );
      end
    end

    always_ff @(posedge clk_i) begin
      if (e_rd_en_i) begin
        e_sel_q  <= e_rd_addr_i[0];
        e_pair_q <= e_rd_pair_i;
      end
      if (d_rd_en_i) d_sel_q <= d_rd_addr_i[0];
    end
    assign e_rd_data_o = e_pair_q ? {e_q[1], e_q[0]}
                                  : {{Width{1'b0}}, (e_sel_q ? e_q[1] : e_q[0])};
    assign d_rd_data_o = d_sel_q ? d_q[1] : d_q[0];

    `TPU_ASSERT_INIT(EvenDepth_A, Depth % 2 == 0 && Depth >= 2)
    `TPU_ASSERT_NEVER(PairReadAligned_A, e_rd_en_i && e_rd_pair_i && e_rd_addr_i[0], clk_i, !rst_ni)
    `TPU_ASSERT_NEVER(PairWriteAligned_A, e_wr_en_i && e_wr_pair_i && e_wr_addr_i[0],
                      clk_i, !rst_ni)
  end

endmodule
