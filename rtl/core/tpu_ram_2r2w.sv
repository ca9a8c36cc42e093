// Behavioural RAM: Depth words of Width bits, two synchronous read ports and two write ports, one
// clock. Read data appears the cycle after the request and holds until the next read on that
// port; a read and a write of the same word in the same cycle return the old word (read-first).
// When both write ports hit the same word in one cycle, port 1 wins (the datapath never does this
// for race-free programs; asserted). No reset: contents are undefined until written.
`include "tpu_assert.svh"

module tpu_ram_2r2w #(
  parameter int unsigned Width = 32,
  parameter int unsigned Depth = 16,
  localparam int unsigned Aw = (Depth > 1) ? $clog2(Depth) : 1
) (
  input  logic             clk_i,
  input  logic             rst_ni,  // assertions only
  input  logic             rd0_en_i,
  input  logic [Aw-1:0]    rd0_addr_i,
  output logic [Width-1:0] rd0_data_o,
  input  logic             rd1_en_i,
  input  logic [Aw-1:0]    rd1_addr_i,
  output logic [Width-1:0] rd1_data_o,
  input  logic             wr0_en_i,
  input  logic [Aw-1:0]    wr0_addr_i,
  input  logic [Width-1:0] wr0_data_i,
  input  logic             wr1_en_i,
  input  logic [Aw-1:0]    wr1_addr_i,
  input  logic [Width-1:0] wr1_data_i
);

  logic [Width-1:0] mem [Depth];

  always_ff @(posedge clk_i) begin
    if (wr0_en_i) mem[wr0_addr_i] <= wr0_data_i;
    if (wr1_en_i) mem[wr1_addr_i] <= wr1_data_i;
  end

  always_ff @(posedge clk_i) begin
    if (rd0_en_i) rd0_data_o <= mem[rd0_addr_i];
  end

  always_ff @(posedge clk_i) begin
    if (rd1_en_i) rd1_data_o <= mem[rd1_addr_i];
  end

  `TPU_ASSERT_NEVER(WriteCollision_A, wr0_en_i && wr1_en_i && (wr0_addr_i == wr1_addr_i),
                    clk_i, !rst_ni)
  `TPU_ASSERT_NEVER(Rd0Range_A, rd0_en_i && (32'(rd0_addr_i) >= Depth), clk_i, !rst_ni)
  `TPU_ASSERT_NEVER(Rd1Range_A, rd1_en_i && (32'(rd1_addr_i) >= Depth), clk_i, !rst_ni)
  `TPU_ASSERT_NEVER(Wr0Range_A, wr0_en_i && (32'(wr0_addr_i) >= Depth), clk_i, !rst_ni)
  `TPU_ASSERT_NEVER(Wr1Range_A, wr1_en_i && (32'(wr1_addr_i) >= Depth), clk_i, !rst_ni)

endmodule
