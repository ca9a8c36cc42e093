// Behavioural simple dual-port RAM for FPGA builds: Depth words of Width bits, one synchronous
// read port and one write port, one clock. This is the shape every FPGA block RAM provides
// (iCE40 SB_RAM40_4K, ECP5 DP16KD, Xilinx RAMB18/36 in SDP mode), so Yosys' memory_libmap maps it
// to block RAM instead of flip-flops. Same read semantics as tpu_ram_2r2w: read data appears the
// cycle after the request and holds until the next read; a read and a write of the same word in
// the same cycle return the old word (read-first). No reset: contents are undefined until written.
`include "tpu_assert.svh"

module tpu_ram_1r1w #(
  parameter int unsigned Width = 32,
  parameter int unsigned Depth = 16,
  localparam int unsigned Aw = (Depth > 1) ? $clog2(Depth) : 1
) (
  input  logic             clk_i,
  input  logic             rst_ni,  // assertions only
  input  logic             rd_en_i,
  input  logic [Aw-1:0]    rd_addr_i,
  output logic [Width-1:0] rd_data_o,
  input  logic             wr_en_i,
  input  logic [Aw-1:0]    wr_addr_i,
  input  logic [Width-1:0] wr_data_i
);

  logic [Width-1:0] mem [Depth];

  always_ff @(posedge clk_i) begin
    if (wr_en_i) mem[wr_addr_i] <= wr_data_i;
  end

  always_ff @(posedge clk_i) begin
    if (rd_en_i) rd_data_o <= mem[rd_addr_i];
  end

  `TPU_ASSERT_NEVER(RdRange_A, rd_en_i && (32'(rd_addr_i) >= Depth), clk_i, !rst_ni)
  `TPU_ASSERT_NEVER(WrRange_A, wr_en_i && (32'(wr_addr_i) >= Depth), clk_i, !rst_ni)

endmodule
