// iCE40 UP5K characterisation build of the matrix unit: tpu_mxu (ArrayN = 4, the PE and array RTL
// of the device, unchanged) driven by on-chip pseudo-random stimulus that keeps the MXU's port
// contract (a weight tile's rows in consecutive cycles, no swap row during a feed), with every
// output row folded into a 32-bit signature (MISR). After 65536 cycles the signature is frozen and
// sent over the UART TX pin, forever, as 8 hex digits and CR LF at Baud (8N1).
//
// Why this build exists: the whole device (tpu_icebreaker_top) needs about 13k LUT4 at N=4, 2.4x
// the UP5K's 5280 logic cells (see docs/fpga.md), so the UP5K cannot hold it. This top is the
// part of the TPU that does fit: it gives a real UP5K bitstream, the MXU's resource use and its
// Fmax from nextpnr, and a board self-test (compare the printed signature with the one
// tests/synth/fpga prints from the Verilator simulation of this module).
// Ports use the iCEBreaker top's names, so constraints/icebreaker.pcf applies as is.
module tpu_ice40_mxu_selftest #(
  parameter int unsigned ArrayN = 4,
  parameter int unsigned ClkHz  = 12000000,
  parameter int unsigned Baud   = 115200,
  parameter int unsigned Cycles = 65536
) (
  input  logic clk_i,       // 12 MHz
  input  logic btn_ni,      // low: restart the self-test
  input  logic rx_i,        // unused
  output logic tx_o,        // signature, 8 hex digits + CR LF, repeated
  output logic led_r_no,    // on (low) while running
  output logic led_g_no     // on (low) when done
);
  localparam int unsigned N   = ArrayN;
  localparam int unsigned Div = (ClkHz + Baud / 2) / Baud;

  // Reset: power-on counter and the button.
  logic [3:0] por_q = 4'd0;
  logic [1:0] btn_q = 2'b00;
  logic       rst_n = 1'b0;
  always_ff @(posedge clk_i) begin
    btn_q <= {btn_q[0], btn_ni};
    if (por_q != 4'hF) por_q <= por_q + 4'd1;
    rst_n <= (por_q == 4'hF) && btn_q[1];
  end

  // Stimulus: a 32-bit Galois LFSR, advanced every cycle.
  logic [31:0] lfsr_q;
  logic [31:0] cyc_q;
  logic [2:0]  feed_q;  // weight rows still to feed (0..N)
  logic        done_q;
  always_ff @(posedge clk_i) begin
    if (!rst_n) begin
      lfsr_q <= 32'hACE1_2468;
      cyc_q  <= '0;
      feed_q <= '0;
      done_q <= 1'b0;
    end else begin
      lfsr_q <= {1'b0, lfsr_q[31:1]} ^ (lfsr_q[0] ? 32'hA300_0001 : 32'h0);
      if (!done_q) cyc_q <= cyc_q + 32'd1;
      if (cyc_q == Cycles - 1) done_q <= 1'b1;
      if (feed_q != 3'd0)             feed_q <= feed_q - 3'd1;
      else if (lfsr_q[7:4] == 4'd0)   feed_q <= 3'(N);  // start a tile about 1 cycle in 16
    end
  end

  logic act_valid, act_swap, wt_valid;
  assign wt_valid  = (feed_q != 3'd0) && !done_q;
  assign act_valid = (lfsr_q[11:8] != 4'd0) && !done_q;                       // ~94% of cycles
  assign act_swap  = act_valid && (feed_q == 3'd0) && (lfsr_q[15:12] == 4'd0);  // no swap in a feed

  logic               out_valid, busy;
  logic [32*N-1:0]    out_data;
  logic [3:0]         out_tag;

  // The int8-only array (EnableBf16 = 0): 16-bit element ports, of which it uses the low byte.
  logic [8*N-1:0]  act8, wt8;
  logic [16*N-1:0] act16, wt16;
  assign act8 = lfsr_q[8*N-1:0];
  assign wt8  = {lfsr_q[8*N-9:0], lfsr_q[31:24]};
  always_comb begin
    for (int unsigned i = 0; i < N; i++) begin
      act16[16*i +: 16] = {8'd0, act8[8*i +: 8]};
      wt16[16*i +: 16]  = {{8{wt8[8*i+7]}}, wt8[8*i +: 8]};
    end
  end

  tpu_mxu #(.ArrayN(N), .TagW(4), .EnableBf16(1'b0)) u_mxu (
    .clk_i, .rst_ni(rst_n),
    .act_valid_i(act_valid), .act_swap_i(act_swap), .act_bf16_i(1'b0),
    .act_data_i(act16), .act_tag_i(lfsr_q[19:16]),
    .wt_valid_i(wt_valid), .wt_transpose_i(1'b0), .wt_data_i(wt16),
    .out_valid_o(out_valid), .out_data_o(out_data), .out_tag_o(out_tag), .busy_o(busy)
  );

  // Signature: MISR over every output row (data xor-folded to 32 bits, tag and busy mixed in).
  logic [31:0] fold;
  always_comb begin
    fold = {27'd0, busy, out_tag};
    for (int unsigned j = 0; j < N; j++) fold = fold ^ out_data[32*j +: 32];
  end
  logic [31:0] sig_q;
  always_ff @(posedge clk_i) begin
    if (!rst_n)                      sig_q <= 32'hFFFF_FFFF;
    else if (out_valid && !done_q)   sig_q <= {sig_q[30:0], sig_q[31] ^ sig_q[21] ^ sig_q[1] ^ sig_q[0]} ^ fold;
  end

  // UART TX of the frozen signature: 10 characters per line ("XXXXXXXX\r\n").
  logic [15:0] baud_q;
  logic [3:0]  bit_q;    // 0 idle/start next, 1..10 bits of the frame
  logic [3:0]  chr_q;    // character index 0..9
  logic [9:0]  sh_q;
  logic [7:0]  chr;
  logic [3:0]  nib;
  assign nib = sig_q[4*(7 - 32'(chr_q[2:0])) +: 4];
  always_comb begin
    if (chr_q == 4'd8)      chr = 8'h0D;
    else if (chr_q == 4'd9) chr = 8'h0A;
    else                    chr = (nib < 4'd10) ? 8'h30 + 8'(nib) : 8'h37 + 8'(nib);
  end
  always_ff @(posedge clk_i) begin
    if (!rst_n || !done_q) begin
      baud_q <= '0;
      bit_q  <= '0;
      chr_q  <= '0;
      sh_q   <= '1;
    end else if (baud_q != 16'd0) begin
      baud_q <= baud_q - 16'd1;
    end else if (bit_q == 4'd0) begin
      sh_q   <= {1'b1, chr, 1'b0};  // stop, data (LSB first), start
      bit_q  <= 4'd10;
      baud_q <= 16'(Div - 1);
    end else begin
      sh_q   <= {1'b1, sh_q[9:1]};
      bit_q  <= bit_q - 4'd1;
      baud_q <= 16'(Div - 1);
      if (bit_q == 4'd1) chr_q <= (chr_q == 4'd9) ? 4'd0 : chr_q + 4'd1;
    end
  end
  assign tx_o     = sh_q[0];
  assign led_r_no = done_q;
  assign led_g_no = !done_q;

  logic unused_in;
  assign unused_in = rx_i ^ ^cyc_q[31:17];
endmodule
