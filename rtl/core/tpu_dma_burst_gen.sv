// Splits one LOAD/STORE host transfer into AXI INCR bursts: `rows` rows of `row_bytes` bytes at
// host_addr + i*host_stride. Bursts are at most 256 beats and never cross a 4 KiB boundary.
// A burst never spans two host rows (even when rows are contiguous), so a failing burst names
// exactly one row: burst_row_o is the start address of the row the burst belongs to, which is
// what an AXI error reports as FAULT_INFO (docs/perf_model.md, AXI_ERROR rule). All sizes are
// multiples of the beat (validated before dispatch). Bursts are also capped at MaxBeats. One burst per cycle: the current burst is offered combinationally on
// burst_valid_o/addr_o/beats_o; burst_take_i consumes it.
`include "tpu_assert.svh"

module tpu_dma_burst_gen #(
  parameter int unsigned DmaDataW  = 128,
  parameter int unsigned MaxBeats  = 256   // longest burst (<= 256)
) (
  input  logic        clk_i,
  input  logic        rst_ni,
  input  logic        start_i,      // only when idle_o
  input  logic [31:0] host_addr_i,
  input  logic [15:0] rows_i,
  input  logic [15:0] row_bytes_i,
  input  logic [23:0] host_stride_i,
  output logic        idle_o,
  output logic        burst_valid_o,
  output logic [31:0] burst_addr_o,
  output logic [8:0]  burst_beats_o,  // 1..256
  output logic        burst_last_o,   // last burst of the transfer
  output logic [31:0] burst_row_o,    // host address of the row this burst belongs to
  input  logic        burst_take_i
);

  localparam int unsigned BeatBytes = DmaDataW / 8;
  localparam int unsigned LogBeat   = $clog2(BeatBytes);
  localparam int unsigned MaxBytes  = ((MaxBeats < 256) ? MaxBeats : 256) * BeatBytes;

  logic        active_q;
  logic [31:0] addr_q, row_base_q, row_rem_q;
  logic [15:0] rows_rem_q;
  logic [15:0] row_bytes_q;
  logic [23:0] stride_q;

  logic [31:0] to4k, bytes;
  logic [12:0] to4k_b;
  assign to4k_b = 13'h1000 - {1'b0, addr_q[11:0]};
  assign to4k   = {19'd0, to4k_b};
  always_comb begin
    bytes = row_rem_q;
    if (to4k < bytes) bytes = to4k;
    if (32'(MaxBytes) < bytes) bytes = 32'(MaxBytes);
  end

  logic row_end;
  assign row_end = (bytes == row_rem_q);

  logic [31:0] beats32;
  assign beats32       = bytes >> LogBeat;
  assign burst_valid_o = active_q;
  assign burst_addr_o  = addr_q;
  assign burst_beats_o = beats32[8:0];
  assign burst_last_o  = row_end && (rows_rem_q == 16'd1);
  assign idle_o        = !active_q;
  assign burst_row_o   = row_base_q;


  logic [31:0] next_row;
  assign next_row = row_base_q + {8'd0, stride_q};

  always_ff @(posedge clk_i) begin
    if (!rst_ni) begin
      active_q    <= 1'b0;
      addr_q      <= '0;
      row_base_q  <= '0;
      row_rem_q   <= '0;
      rows_rem_q  <= '0;
      row_bytes_q <= '0;
      stride_q    <= '0;
    end else if (start_i) begin
      active_q    <= 1'b1;
      addr_q      <= host_addr_i;
      row_base_q  <= host_addr_i;
      row_rem_q   <= {16'd0, row_bytes_i};
      rows_rem_q  <= rows_i;
      row_bytes_q <= row_bytes_i;
      stride_q    <= host_stride_i;
    end else if (active_q && burst_take_i) begin
      if (row_end) begin
        if (rows_rem_q == 16'd1) begin
          active_q <= 1'b0;
        end else begin
          rows_rem_q <= rows_rem_q - 16'd1;
          row_base_q <= next_row;
          addr_q     <= next_row;
          row_rem_q  <= {16'd0, row_bytes_q};
        end
      end else begin
        addr_q    <= addr_q + bytes;
        row_rem_q <= row_rem_q - bytes;
      end
    end
  end

  logic unused_b;
  assign unused_b = ^beats32[31:9];

  `TPU_ASSERT_INIT(MaxBeatsRange_A, MaxBeats >= 1 && MaxBeats <= 256)
  `TPU_ASSERT_NEVER(StartBusy_A, start_i && active_q, clk_i, !rst_ni)
  `TPU_ASSERT_NEVER(TakeIdle_A, burst_take_i && !active_q, clk_i, !rst_ni)
  `TPU_ASSERT(No4kCross_A, active_q |-> ({20'd0, addr_q[11:0]} + bytes) <= 32'h1000, clk_i, !rst_ni)
  `TPU_ASSERT(BeatAligned_A, active_q |-> (bytes[LogBeat-1:0] == '0) && (bytes != 32'd0),
              clk_i, !rst_ni)

endmodule
