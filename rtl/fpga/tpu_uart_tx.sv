// UART transmitter, 8N1, LSB first, div_i clock cycles per bit (run-time value, >= 4).
// data_valid_i/data_ready_o handshake: a byte is taken when both are high; the line is driven
// from a flop (no glitches on the pin).
`include "tpu_assert.svh"

module tpu_uart_tx (
  input  logic        clk_i,
  input  logic        rst_ni,
  input  logic [15:0] div_i,
  input  logic [7:0]  data_i,
  input  logic        data_valid_i,
  output logic        data_ready_o,
  output logic        tx_o,
  output logic        busy_o
);

  logic [9:0]  shift_q, shift_d;   // {stop, data[7:0], start}, shifted out LSB first
  logic [3:0]  bits_q, bits_d;     // bits left to send, including the current one
  logic [15:0] cnt_q, cnt_d;
  logic        tx_q, tx_d;

  assign data_ready_o = (bits_q == 4'd0);
  assign busy_o       = !data_ready_o;
  assign tx_o         = tx_q;

  always_comb begin
    shift_d = shift_q;
    bits_d  = bits_q;
    cnt_d   = cnt_q;
    tx_d    = tx_q;
    if (bits_q == 4'd0) begin
      tx_d = 1'b1;
      if (data_valid_i) begin
        shift_d = {1'b1, data_i, 1'b0};
        bits_d  = 4'd10;
        cnt_d   = div_i - 16'd1;
        tx_d    = 1'b0;                     // start bit
      end
    end else if (cnt_q != 16'd0) begin
      cnt_d = cnt_q - 16'd1;
    end else begin
      shift_d = {1'b1, shift_q[9:1]};
      bits_d  = bits_q - 4'd1;
      cnt_d   = div_i - 16'd1;
      tx_d    = (bits_q == 4'd1) ? 1'b1 : shift_q[1];
    end
  end

  always_ff @(posedge clk_i) begin
    if (!rst_ni) begin
      shift_q <= '1;
      bits_q  <= '0;
      cnt_q   <= '0;
      tx_q    <= 1'b1;
    end else begin
      shift_q <= shift_d;
      bits_q  <= bits_d;
      cnt_q   <= cnt_d;
      tx_q    <= tx_d;
    end
  end

  `TPU_ASSERT(DivMin_A, div_i >= 16'd4, clk_i, !rst_ni)

endmodule
