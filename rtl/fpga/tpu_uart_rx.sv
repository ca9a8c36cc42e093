// UART receiver, 8N1, LSB first. The bit time is div_i clock cycles (run-time value, >= 4), so the
// bridge can change the baud rate without resynthesis. The pin goes through a two-flop
// synchronizer; a falling edge starts a frame, the start bit is checked at its middle and every
// further bit is sampled one bit time later. A byte is delivered (data_valid_o for one cycle) when
// the stop bit is high; a low stop bit is a framing error (frame_err_o pulse, byte dropped).
`include "tpu_assert.svh"

module tpu_uart_rx (
  input  logic        clk_i,
  input  logic        rst_ni,
  input  logic [15:0] div_i,        // clock cycles per bit
  input  logic        rx_i,         // the pin (asynchronous)
  output logic [7:0]  data_o,
  output logic        data_valid_o,
  output logic        frame_err_o,
  output logic        busy_o        // a frame is being received
);

  typedef enum logic [1:0] {StIdle, StStart, StData, StStop} state_e;

  logic [1:0]  sync_q;
  state_e      state_q, state_d;
  logic [15:0] cnt_q, cnt_d;
  logic [2:0]  bit_q, bit_d;
  logic [7:0]  shift_q, shift_d;
  logic        rx_s;

  assign rx_s = sync_q[1];

  always_ff @(posedge clk_i) begin
    if (!rst_ni) sync_q <= 2'b11;
    else         sync_q <= {sync_q[0], rx_i};
  end

  always_comb begin
    state_d      = state_q;
    cnt_d        = cnt_q;
    bit_d        = bit_q;
    shift_d      = shift_q;
    data_valid_o = 1'b0;
    frame_err_o  = 1'b0;
    unique case (state_q)
      StIdle: begin
        if (!rx_s) begin
          state_d = StStart;
          cnt_d   = {1'b0, div_i[15:1]} - 16'd1;  // to the middle of the start bit
        end
      end
      StStart: begin
        if (cnt_q != 16'd0) begin
          cnt_d = cnt_q - 16'd1;
        end else if (rx_s) begin
          state_d = StIdle;                     // glitch, not a start bit
        end else begin
          state_d = StData;
          cnt_d   = div_i - 16'd1;
          bit_d   = 3'd0;
        end
      end
      StData: begin
        if (cnt_q != 16'd0) begin
          cnt_d = cnt_q - 16'd1;
        end else begin
          shift_d = {rx_s, shift_q[7:1]};
          cnt_d   = div_i - 16'd1;
          bit_d   = bit_q + 3'd1;
          if (bit_q == 3'd7) state_d = StStop;
        end
      end
      StStop: begin
        if (cnt_q != 16'd0) begin
          cnt_d = cnt_q - 16'd1;
        end else begin
          // Back to idle at the middle of the stop bit: the next start edge may follow at once.
          state_d      = StIdle;
          data_valid_o = rx_s;
          frame_err_o  = !rx_s;
        end
      end
      default: state_d = StIdle;
    endcase
  end

  always_ff @(posedge clk_i) begin
    if (!rst_ni) begin
      state_q <= StIdle;
      cnt_q   <= '0;
      bit_q   <= '0;
      shift_q <= '0;
    end else begin
      state_q <= state_d;
      cnt_q   <= cnt_d;
      bit_q   <= bit_d;
      shift_q <= shift_d;
    end
  end

  assign data_o = shift_q;
  assign busy_o = (state_q != StIdle);

  `TPU_ASSERT(DivMin_A, div_i >= 16'd4, clk_i, !rst_ni)

endmodule
