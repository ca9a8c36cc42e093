// Activation path of the compute engine (ACTIVATE): reads the multiplier, shift (and bias)
// rows, then one ACC row every ActP = ArrayN/ActLanes cycles through tpu_act_unit (ActP+1
// cycles) into consecutive UB rows. go_i starts an instruction (the compute engine dispatches
// it only when no MATMUL result is outstanding and no ACTIVATE is in flight); done_o pulses with
// its last UB write; busy_o is high from go_i to done_o. Parameter rows arrive the cycle after
// their read; without the bias flag the bias row stays zero.
// bf16 mode (bf16_i, EnableBf16): no multiplier/shift rows; the bias row (if any), then one ACC
// row per cycle through a full-width fp32 stage (docs/numerics.md: x = acc (+ bias, one fp32
// addition); ReLU keeps x > 0 and NaN, else +0; fp32 -> bf16 round to nearest even), registered,
// and written as one UB row pair (ub_addr + 2i, ub_wr_pair_o) the cycle after the read data.
// Lookup table (lut_i, EnableLut, ISA 1.2, int8 only): after the shift row, the LutRows =
// max(1, 64/ArrayN) ACC rows from qparam_addr + 2 are read into a 256-byte table register
// (entry e = byte e of the rows, little-endian words in row-major order); tpu_act_unit maps every
// saturated result r to entry r + 128. A LUT ACTIVATE takes LutRows more cycles; others none.
`include "tpu_assert.svh"

module tpu_act_seq #(
  parameter int unsigned ArrayN   = 16,
  parameter int unsigned UbDepth  = 32768,
  parameter int unsigned AccDepth = 4096,
  parameter int unsigned ActLanes = ArrayN,  // requantize lanes (tpu_act_unit)
  parameter bit          EnableBf16 = 1'b1,
  parameter bit          EnableLut  = 1'b1,
  localparam int unsigned UbAw    = $clog2(UbDepth),
  localparam int unsigned AccAw   = $clog2(AccDepth)
) (
  input  logic                 clk_i,
  input  logic                 rst_ni,
  // the ACTIVATE being dispatched
  input  logic                 go_i,
  input  logic [AccAw-1:0]     acc_addr_i,
  input  logic [UbAw-1:0]      ub_addr_i,
  input  logic [15:0]          rows_i,
  input  logic                 bias_en_i,
  input  logic                 relu_i,
  input  logic                 bf16_i,
  input  logic                 lut_i,
  input  logic [AccAw-1:0]     qparam_addr_i,
  input  logic [AccAw-1:0]     bias_addr_i,
  // ACC read port (shared with the MATMUL accumulate path, which never overlaps)
  output logic                 acc_rd_en_o,
  output logic [AccAw-1:0]     acc_rd_addr_o,
  input  logic [32*ArrayN-1:0] acc_rd_data_i,
  // UB write port
  output logic                 ub_wr_en_o,
  output logic [UbAw-1:0]      ub_wr_addr_o,
  output logic                 ub_wr_pair_o,    // bf16: a row pair {row 2r+1, row 2r}
  output logic [16*ArrayN-1:0] ub_wr_data_o,
  output logic                 busy_o,
  output logic                 done_o
);

  localparam int unsigned N       = ArrayN;
  localparam int unsigned ActTagW = UbAw + 1;             // {last, ub row}
  localparam int unsigned ActP    = ArrayN / ActLanes;    // cycles per row in tpu_act_unit
  localparam int unsigned LutRows = (ArrayN >= 64) ? 1 : 64 / ArrayN;  // ACC rows of the table
  localparam int unsigned LutRowW = (32 * ArrayN < 2048) ? 32 * ArrayN : 2048;  // table bits per row
  localparam int unsigned LutIdxW = (LutRows > 1) ? $clog2(LutRows) : 1;

  typedef enum logic [2:0] {
    ActIdle, ActMult, ActShift, ActLut, ActBias, ActRows
  } act_st_e;
  typedef enum logic [2:0] {
    KNone, KMult, KShift, KLut, KBias, KRow
  } rd_kind_e;

  act_st_e          act_st_q;
  logic             act_busy_q;                // dispatched and last UB row not yet written
  logic [AccAw-1:0] act_acc_q, act_qp_q, act_bias_addr_q;
  logic [UbAw-1:0]  act_ub_q;
  logic [15:0]      act_left_q;
  logic             act_bias_en_q, act_relu_q, act_bf16_q, act_lut_q;
  logic [LutIdxW-1:0] lut_cnt_q;               // ActLut: table row being read
  logic [LutIdxW-1:0] ak_lut_q;                // KLut: which table row the read data is
  logic [2047:0]    lut_table;                 // the table (tpu_act_unit)
  localparam logic [LutIdxW-1:0] LutLast = LutIdxW'(LutRows - 1);
  rd_kind_e         ak_q;                      // what the ACC read port returns this cycle
  logic [ActTagW-1:0] ak_tag_q;
  logic [32*N-1:0]  bias_q, mult_q;
  logic [6*N-1:0]   shift_q;

  // With time-shared lanes (ActP > 1) the unit takes a row at most every ActP cycles and the
  // read data cannot wait (nothing buffers it): ActRows issues a read only when the unit will be
  // ready the cycle the data arrives. A row read at r reaches the unit at r+1, which keeps it busy
  // through r+ActP, so the next read may issue at r+ActP. At full width act_pace_ok is constant 1
  // and the sequencer reads one row per cycle, as it always did.
  logic act_pace_ok;   // ActRows may read an ACC row this cycle
  logic act_row_rd;    // ActRows reads an ACC row this cycle
  logic act_rows_last;
  assign act_row_rd    = (act_st_q == ActRows) && (act_pace_ok || act_bf16_q);
  assign act_rows_last = act_row_rd && (act_left_q == 16'd1);

  if (ActP == 1) begin : g_act_full
    assign act_pace_ok = 1'b1;
  end else begin : g_act_paced
    localparam int unsigned PaceW = $clog2(ActP);
    logic [PaceW-1:0] act_pace_q;  // cycles until the next ACC row read may issue
    always_ff @(posedge clk_i) begin
      if (!rst_ni)                  act_pace_q <= '0;
      else if (act_row_rd)          act_pace_q <= PaceW'(ActP - 1);
      else if (act_pace_q != '0)    act_pace_q <= act_pace_q - 1'b1;
    end
    assign act_pace_ok = (act_pace_q == '0);
  end

  always_comb begin
    acc_rd_en_o   = 1'b1;
    acc_rd_addr_o = act_acc_q;
    case (act_st_q)
      ActMult:  acc_rd_addr_o = act_qp_q;
      ActShift: acc_rd_addr_o = act_qp_q + 1'b1;
      ActLut:   acc_rd_addr_o = act_qp_q + AccAw'(2) + AccAw'(lut_cnt_q);
      ActBias:  acc_rd_addr_o = act_bias_addr_q;
      ActRows:  begin acc_rd_en_o = act_pace_ok || act_bf16_q; acc_rd_addr_o = act_acc_q; end
      default:  acc_rd_en_o   = 1'b0;
    endcase
  end

  always_ff @(posedge clk_i) begin
    if (!rst_ni) begin
      act_st_q   <= ActIdle;
      act_busy_q <= 1'b0;
      ak_q       <= KNone;
    end else begin
      if (go_i)        act_busy_q <= 1'b1;
      else if (done_o) act_busy_q <= 1'b0;
      ak_q <= KNone;
      case (act_st_q)
        ActIdle:  if (go_i) begin
                    // bf16: no requantization rows
                    if (EnableBf16 && bf16_i) act_st_q <= bias_en_i ? ActBias : ActRows;
                    else                      act_st_q <= ActMult;
                  end
        ActMult:  begin ak_q <= KMult;  act_st_q <= ActShift; end
        ActShift: begin
                    ak_q <= KShift;
                    if (act_lut_q)          act_st_q <= ActLut;
                    else if (act_bias_en_q) act_st_q <= ActBias;
                    else                    act_st_q <= ActRows;
                  end
        ActLut:   begin
                    ak_q <= KLut;
                    if (lut_cnt_q == LutLast) act_st_q <= act_bias_en_q ? ActBias : ActRows;
                  end
        ActBias:  begin ak_q <= KBias;  act_st_q <= ActRows; end
        ActRows:  if (act_pace_ok || act_bf16_q) begin
                    ak_q <= KRow;
                    if (act_rows_last) act_st_q <= ActIdle;
                  end
        default:  act_st_q <= ActIdle;
      endcase
    end
  end

  always_ff @(posedge clk_i) begin
    if (go_i) begin
      act_acc_q       <= acc_addr_i;
      act_ub_q        <= ub_addr_i;
      act_left_q      <= rows_i;
      act_bias_en_q   <= bias_en_i;
      act_relu_q      <= relu_i;
      act_bf16_q      <= EnableBf16 && bf16_i;
      act_lut_q       <= EnableLut && lut_i && !(EnableBf16 && bf16_i);
      act_qp_q        <= qparam_addr_i;
      act_bias_addr_q <= bias_addr_i;
    end else if (act_row_rd) begin
      act_acc_q  <= act_acc_q + 1'b1;
      act_ub_q   <= act_ub_q + (act_bf16_q ? UbAw'(2) : UbAw'(1));
      act_left_q <= act_left_q - 16'd1;
    end
    if (act_row_rd) ak_tag_q <= {act_rows_last, act_ub_q};
    if (go_i)                    lut_cnt_q <= '0;
    else if (act_st_q == ActLut) lut_cnt_q <= lut_cnt_q + 1'b1;
    ak_lut_q <= lut_cnt_q;
    // Parameter rows arrive the cycle after their read.
    if (go_i) bias_q <= '0;  // stays zero without the bias flag
    if (ak_q == KMult) mult_q <= acc_rd_data_i;
    if (ak_q == KBias) bias_q <= acc_rd_data_i;
    if (ak_q == KShift) begin
      for (int unsigned j = 0; j < N; j++) shift_q[6*j +: 6] <= acc_rd_data_i[32*j +: 6];
    end
  end

  logic               act_in_valid, act_in_ready;
  logic               act_out_valid, act_unit_busy;
  logic [ActTagW-1:0] act_out_tag;
  logic               act_out_last;
  logic [UbAw-1:0]    act_out_ub;

  logic [8*N-1:0]     act_out_data;

  // The table register: written only by a LUT ACTIVATE's table rows (behind their read kind).
  if (EnableLut) begin : g_lut
    logic [2047:0] lut_q;
    always_ff @(posedge clk_i) begin
      if (ak_q == KLut) lut_q[LutRowW*ak_lut_q +: LutRowW] <= acc_rd_data_i[LutRowW-1:0];
    end
    assign lut_table = lut_q;
  end else begin : g_no_lut
    assign lut_table = '0;
    logic unused_lut;
    assign unused_lut = ^ak_lut_q;
  end

  tpu_act_unit #(
    .ArrayN   (ArrayN),
    .ActLanes (ActLanes),
    .TagW     (ActTagW),
    .EnableLut(EnableLut)
  ) u_act (
    .clk_i,
    .rst_ni,
    .in_valid_i  (act_in_valid),
    .in_ready_o  (act_in_ready),
    .in_acc_i    (acc_rd_data_i),
    .in_tag_i    (ak_tag_q),
    .bias_i      (bias_q),
    .mult_i      (mult_q),
    .shift_i     (shift_q),
    .relu_i      (act_relu_q),
    .lut_en_i    (act_lut_q),
    .lut_table_i (lut_table),
    .out_valid_o (act_out_valid),
    .out_data_o  (act_out_data),
    .out_tag_o   (act_out_tag),
    .busy_o      (act_unit_busy)
  );

  assign act_in_valid = (ak_q == KRow) && !act_bf16_q;
  assign {act_out_last, act_out_ub} = act_out_tag;

  // bf16 rows: one registered fp32 stage, full width, behind its valid (int8 ACTIVATEs do not
  // evaluate it in simulation).
  logic               bf_valid_q, bf_last;
  logic [ActTagW-1:0] bf_tag_q;
  logic [UbAw-1:0]    bf_ub;
  logic [16*N-1:0]    bf_res_q;
  if (EnableBf16) begin : g_bf16
    always_ff @(posedge clk_i) begin
      if (!rst_ni) bf_valid_q <= 1'b0;
      else         bf_valid_q <= (ak_q == KRow) && act_bf16_q;
    end
    always_ff @(posedge clk_i) begin
      if ((ak_q == KRow) && act_bf16_q) begin
        bf_tag_q <= ak_tag_q;
        for (int unsigned j = 0; j < N; j++) begin
          logic [31:0] x;
          x = acc_rd_data_i[32*j +: 32];
          if (act_bias_en_q) x = tpu_fp_pkg::fp32_add(x, bias_q[32*j +: 32]);
          // ReLU: +0 unless x > 0 (positive and normal or inf) or NaN.
          if (act_relu_q && !((!x[31] && x[30:23] != 8'd0) ||
                              (x[30:23] == 8'hFF && x[22:0] != 23'd0))) begin
            x = 32'd0;
          end
          bf_res_q[16*j +: 16] <= tpu_fp_pkg::fp32_to_bf16(x);
        end
      end
    end
  end else begin : g_int8
    assign bf_valid_q = 1'b0;
    assign bf_tag_q   = '0;
    assign bf_res_q   = '0;
  end
  assign {bf_last, bf_ub} = bf_tag_q;

  assign ub_wr_en_o   = act_out_valid || bf_valid_q;
  assign ub_wr_addr_o = bf_valid_q ? bf_ub : act_out_ub;
  assign ub_wr_pair_o = bf_valid_q;
  assign ub_wr_data_o = bf_valid_q ? bf_res_q : {{(8*N){1'b0}}, act_out_data};
  assign done_o       = (act_out_valid && act_out_last) || (bf_valid_q && bf_last);

  assign busy_o = act_busy_q;

  `TPU_ASSERT_NEVER(ActUnitIdleMismatch_A, act_unit_busy && !act_busy_q, clk_i, !rst_ni)
  // The pacing delivers every ACC row the cycle the unit can take it (the data cannot wait).
  `TPU_ASSERT_NEVER(ActRowDropped_A, act_in_valid && !act_in_ready, clk_i, !rst_ni)
  // One ACTIVATE at a time: the two result paths never write in the same cycle.
  `TPU_ASSERT_NEVER(ActPathsOverlap_A, act_out_valid && bf_valid_q, clk_i, !rst_ni)
  `TPU_ASSERT(ActivateRows_A, !go_i || rows_i != '0, clk_i, !rst_ni)

endmodule
