// LOAD engine: host memory -> UB / WB / ACC over AXI4 reads (ARID set by the top).
//
// Front end: tpu_dma_burst_gen splits the instruction into bursts; a burst is put on AR only
// when the beat buffer has room for all its beats (credits; bursts are at most MaxBeats
// long), so R is always accepted
// (rready = 1) and many bursts may be outstanding (up to BufBeats beats).
// Back end: beats are converted to local rows (a beat holds several rows, or a row spans several
// beats; both are powers of two) and written through the datapath's dma_wr port, one row per
// handshake. Beats answered with SLVERR/DECERR are not written; once a beat of an instruction
// has failed, the rest of that instruction is not written either. The error is reported on
// err_o (with the host address of the failing burst's row and the instruction's address) and the
// instruction still completes (done_o) so the machine drains.
//
// Cycle costs: accept -> first AR valid: 1 cycle (gen state) + 1 (AR register) = AR on the
// bus 2 cycles after acceptance; then one burst per cycle while credits last. A new instruction
// is accepted the cycle after the previous one issued its last burst. done_o pulses one cycle
// after the last row's write handshake.
`include "tpu_assert.svh"

module tpu_dma_load #(
  parameter int unsigned ArrayN    = 16,
  parameter int unsigned DmaDataW  = 128,
  parameter int unsigned BufBeats  = 32,   // R beat buffer (credits)
  parameter int unsigned MaxBeats  = 16,   // longest burst; <= BufBeats so two can overlap
  parameter int unsigned DescDepth = 4
) (
  input  logic                  clk_i,
  input  logic                  rst_ni,
  input  logic                  stop_i,

  input  logic                  valid_i,
  output logic                  ready_o,
  input  tpu_isa_pkg::load_t    instr_i,
  input  logic [31:0]           pc_i,
  output logic                  done_o,
  output logic                  idle_o,
  output logic                  err_o,
  output logic [31:0]           err_addr_o,
  output logic [31:0]           err_pc_o,

  output logic                  arvalid_o,
  input  logic                  arready_i,
  output logic [31:0]           araddr_o,
  output logic [7:0]            arlen_o,
  input  logic                  rvalid_i,
  output logic                  rready_o,
  input  logic [DmaDataW-1:0]   rdata_i,
  input  logic [1:0]            rresp_i,
  input  logic                  rlast_i,

  output logic                  wr_valid_o,
  input  logic                  wr_ready_i,
  output logic [1:0]            wr_mem_o,
  output logic [19:0]           wr_addr_o,
  output logic [32*ArrayN-1:0]  wr_data_o
);

  localparam int unsigned RowW   = 32 * ArrayN;     // ACC row bits (UB/WB use the low 8N)
  localparam int unsigned UbW    = 8 * ArrayN;
  localparam int unsigned BW     = DmaDataW;
  // rows per beat (row narrower than beat) / beats per row (row wider than beat)
  localparam int unsigned USub   = (UbW < BW) ? BW / UbW : 1;
  localparam int unsigned UBpr   = (UbW > BW) ? UbW / BW : 1;
  localparam int unsigned ASub   = (RowW < BW) ? BW / RowW : 1;
  localparam int unsigned ABpr   = (RowW > BW) ? RowW / BW : 1;
  localparam int unsigned SubW   = (USub > 1) ? $clog2(USub) : 1;
  localparam int unsigned BprW   = (ABpr > 1) ? $clog2(ABpr) : 1;
  localparam int unsigned LogUbRow  = $clog2(ArrayN);
  localparam int unsigned LogAccRow = $clog2(4 * ArrayN);
  localparam int unsigned CredW  = $clog2(BufBeats + 1);
  localparam int unsigned IfW    = $clog2(DescDepth + 2);

  // ---------------------------------------------------------------------------------------------
  // Accept
  // ---------------------------------------------------------------------------------------------
  logic [1:0]  i_mem;
  logic [19:0] i_local;
  logic [31:0] i_host;
  logic [15:0] i_rows, i_rbytes;
  logic [23:0] i_stride;
  assign i_mem    = instr_i.mem;
  assign i_local  = instr_i.local_addr;
  assign i_host   = instr_i.host_addr;
  assign i_rows   = instr_i.rows;
  assign i_rbytes = instr_i.row_bytes;
  assign i_stride = instr_i.host_stride;

  logic        i_is_acc;
  logic [31:0] i_nrows;
  assign i_is_acc = (i_mem == 2'(tpu_isa_pkg::MemAcc));
  logic [15:0] i_rph;   // local rows per host row
  assign i_rph    = i_is_acc ? (i_rbytes >> LogAccRow) : (i_rbytes >> LogUbRow);
  assign i_nrows  = {16'd0, i_rows} * {16'd0, i_rph};

  logic gen_idle, desc_full, accept;
  assign ready_o = gen_idle && !desc_full;
  assign accept  = valid_i && ready_o;

  logic        gen_valid, gen_last, gen_take;
  logic [31:0] gen_addr, gen_row;
  logic [8:0]  gen_beats;

  tpu_dma_burst_gen #(.DmaDataW(DmaDataW), .MaxBeats(MaxBeats)) u_gen (
    .clk_i, .rst_ni,
    .start_i(accept), .host_addr_i(i_host), .rows_i(i_rows), .row_bytes_i(i_rbytes),
    .host_stride_i(i_stride), .idle_o(gen_idle),
    .burst_valid_o(gen_valid), .burst_addr_o(gen_addr), .burst_beats_o(gen_beats),
    .burst_last_o(gen_last), .burst_row_o(gen_row), .burst_take_i(gen_take)
  );

  // pc of the instruction whose bursts the generator is producing
  logic [31:0] gen_pc_q;
  always_ff @(posedge clk_i) begin
    if (!rst_ni)     gen_pc_q <= '0;
    else if (accept) gen_pc_q <= pc_i;
  end

  // descriptor for the write-back side: {mem, local_addr, nrows}
  logic        desc_empty, desc_pop;
  logic [53:0] desc_rdata;
  tpu_fifo #(.Width(54), .Depth(DescDepth)) u_desc (
    .clk_i, .rst_ni, .flush_i(1'b0),
    .push_i(accept), .wdata_i({i_mem, i_local, i_nrows}), .pop_i(desc_pop),
    .rdata_o(desc_rdata), .empty_o(desc_empty), .full_o(desc_full), .count_o()
  );

  // ---------------------------------------------------------------------------------------------
  // AR
  // ---------------------------------------------------------------------------------------------
  logic              ar_valid_q;
  logic [31:0]       ar_addr_q;
  logic [7:0]        ar_len_q;
  logic [CredW-1:0]  credit_q;
  logic              bf_full, bf_empty;
  logic [63:0]       bf_rdata;        // {row addr, pc} of the oldest outstanding burst
  logic              data_pop;

  assign gen_take = gen_valid && !stop_i && (!ar_valid_q || arready_i) && !bf_full &&
                    ({{(32-CredW){1'b0}}, credit_q} >= {23'd0, gen_beats});

  always_ff @(posedge clk_i) begin
    if (!rst_ni) begin
      ar_valid_q <= 1'b0;
      ar_addr_q  <= '0;
      ar_len_q   <= '0;
    end else begin
      if (arready_i) ar_valid_q <= 1'b0;
      if (gen_take) begin
        ar_valid_q <= 1'b1;
        ar_addr_q  <= gen_addr;
        ar_len_q   <= 8'(gen_beats - 9'd1);
      end
    end
  end

  logic [CredW-1:0] credit_take;
  assign credit_take = gen_take ? CredW'(gen_beats) : CredW'(0);
  tpu_counter #(.Width(CredW), .ResetValue(BufBeats)) u_credit (
    .clk_i, .rst_ni, .clr_i(1'b0), .incr_i(CredW'(data_pop)), .decr_i(credit_take),
    .q_o(credit_q)
  );

  assign arvalid_o = ar_valid_q;
  assign araddr_o  = ar_addr_q;
  assign arlen_o   = ar_len_q;

  tpu_fifo #(.Width(64), .Depth(BufBeats)) u_bursts (
    .clk_i, .rst_ni, .flush_i(1'b0),
    .push_i(gen_take), .wdata_i({gen_row, gen_pc_q}), .pop_i(rvalid_i && rlast_i),
    .rdata_o(bf_rdata), .empty_o(bf_empty), .full_o(bf_full), .count_o()
  );

  // ---------------------------------------------------------------------------------------------
  // R -> beat buffer
  // ---------------------------------------------------------------------------------------------
  logic          beat_err;
  logic          data_empty, data_full;
  logic [BW:0]   data_rdata;
  assign beat_err  = rresp_i[1];
  assign rready_o  = 1'b1;

  tpu_fifo #(.Width(BW + 1), .Depth(BufBeats)) u_data (
    .clk_i, .rst_ni, .flush_i(1'b0),
    .push_i(rvalid_i), .wdata_i({beat_err, rdata_i}), .pop_i(data_pop),
    .rdata_o(data_rdata), .empty_o(data_empty), .full_o(data_full), .count_o()
  );

  assign err_o      = rvalid_i && beat_err;
  assign err_addr_o = bf_rdata[63:32];
  assign err_pc_o   = bf_rdata[31:0];

  // ---------------------------------------------------------------------------------------------
  // Beats -> rows
  // ---------------------------------------------------------------------------------------------
  logic [1:0]  d_mem;
  logic [19:0] d_local;
  logic [31:0] d_nrows;
  logic        d_is_acc;
  assign {d_mem, d_local, d_nrows} = desc_rdata;
  assign d_is_acc = (d_mem == 2'(tpu_isa_pkg::MemAcc));

  logic [BW-1:0] beat;
  logic          beat_bad;
  assign beat     = data_rdata[BW-1:0];
  assign beat_bad = data_rdata[BW];

  logic [31:0]     ridx_q;       // row within the instruction
  logic [SubW-1:0] sub_q;        // row within the beat (row narrower than beat)
  logic [BprW-1:0] bcnt_q;       // beat within the row (row wider than beat)
  logic            ierr_q;       // the instruction has seen a failing beat
  logic            rerr_q;       // the row being assembled has seen a failing beat

  logic out_valid_q, out_drop_q, out_last_q;
  logic [1:0]  out_mem_q;
  logic [19:0] out_addr_q;
  logic [RowW-1:0] out_data_q;
  logic out_fire, out_free;
  assign out_fire = out_valid_q && (out_drop_q || wr_ready_i);
  assign out_free = !out_valid_q || out_fire;

  logic [SubW-1:0] sub_n1;   // rows per beat - 1
  logic [BprW-1:0] bpr_n1;   // beats per row - 1
  assign sub_n1 = d_is_acc ? SubW'(ASub - 1) : SubW'(USub - 1);
  assign bpr_n1 = d_is_acc ? BprW'(ABpr - 1) : BprW'(UBpr - 1);

  logic            have;
  logic            partial;   // stash a beat of a multi-beat row
  logic            emit;      // produce a row this cycle
  logic            row_last;
  assign have     = !data_empty && !desc_empty;
  assign partial  = have && (bcnt_q != bpr_n1);
  assign emit     = have && !partial && out_free;
  assign row_last = (ridx_q == d_nrows - 32'd1);
  assign data_pop = partial || (emit && (sub_q == sub_n1));
  assign desc_pop = emit && row_last;

  // row assembly register (only when a row can be wider than a beat)
  logic [RowW-1:0] asm_q, row_wide;
  if (RowW > BW) begin : g_asm
    always_comb begin
      row_wide = asm_q;
      row_wide[bcnt_q*BW +: BW] = beat;
    end
    always_ff @(posedge clk_i) begin
      if (!rst_ni) asm_q <= '0;
      else if (partial) asm_q <= row_wide;
    end
  end else begin : g_no_asm
    assign row_wide = '0;
    assign asm_q    = '0;
    logic unused_asm;
    assign unused_asm = ^{asm_q, row_wide, bcnt_q};
  end

  // the row produced from the current beat
  logic [RowW-1:0] row_ub, row_acc, row_d;
  if (USub > 1) begin : g_ub_sub
    assign row_ub = RowW'(beat[sub_q*UbW +: UbW]);
  end else if (UBpr > 1) begin : g_ub_wide
    assign row_ub = RowW'(row_wide[UbW-1:0]);
  end else begin : g_ub_eq
    assign row_ub = RowW'(beat);
  end
  if (ASub > 1) begin : g_acc_sub
    assign row_acc = beat[sub_q*RowW +: RowW];
  end else if (ABpr > 1) begin : g_acc_wide
    assign row_acc = row_wide;
  end else begin : g_acc_eq
    assign row_acc = beat[RowW-1:0];
  end
  assign row_d = d_is_acc ? row_acc : row_ub;

  logic row_bad;
  assign row_bad = ierr_q || rerr_q || beat_bad;

  always_ff @(posedge clk_i) begin
    if (!rst_ni) begin
      ridx_q      <= '0;
      sub_q       <= '0;
      bcnt_q      <= '0;
      ierr_q      <= 1'b0;
      rerr_q      <= 1'b0;
      out_valid_q <= 1'b0;
      out_drop_q  <= 1'b0;
      out_last_q  <= 1'b0;
      out_mem_q   <= '0;
      out_addr_q  <= '0;
      out_data_q  <= '0;
    end else begin
      if (out_fire) out_valid_q <= 1'b0;
      if (partial) begin
        bcnt_q <= bcnt_q + BprW'(1);
        if (beat_bad) rerr_q <= 1'b1;
      end
      if (emit) begin
        out_valid_q <= 1'b1;
        out_drop_q  <= row_bad;
        out_last_q  <= row_last;
        out_mem_q   <= d_mem;
        out_addr_q  <= d_local + ridx_q[19:0];
        out_data_q  <= row_d;
        bcnt_q      <= '0;
        rerr_q      <= 1'b0;
        sub_q       <= (sub_q == sub_n1) ? '0 : sub_q + SubW'(1);
        if (row_last) begin
          ridx_q <= '0;
          ierr_q <= 1'b0;
          sub_q  <= '0;
        end else begin
          ridx_q <= ridx_q + 32'd1;
          if (row_bad) ierr_q <= 1'b1;
        end
      end
    end
  end

  assign wr_valid_o = out_valid_q && !out_drop_q;
  assign wr_mem_o   = out_mem_q;
  assign wr_addr_o  = out_addr_q;
  assign wr_data_o  = out_data_q;

  // ---------------------------------------------------------------------------------------------
  // done / idle
  // ---------------------------------------------------------------------------------------------
  logic          done_q;
  logic [IfW-1:0] inflight_q;
  always_ff @(posedge clk_i) begin
    if (!rst_ni) begin
      done_q     <= 1'b0;
    end else begin
      done_q     <= out_fire && out_last_q;
    end
  end
  tpu_counter #(.Width(IfW)) u_inflight (
    .clk_i, .rst_ni, .clr_i(1'b0), .incr_i(IfW'(accept)), .decr_i(IfW'(done_q)), .q_o(inflight_q)
  );
  assign done_o = done_q;
  assign idle_o = (inflight_q == '0);

  logic unused_l;
  assign unused_l = ^{rresp_i[0], bf_empty, gen_last, instr_i.rsvd124, instr_i.rsvd14,
                      instr_i.hdr};

  // ---------------------------------------------------------------------------------------------
  // Assertions
  // ---------------------------------------------------------------------------------------------
  `TPU_ASSERT(ArStable_A, arvalid_o && !arready_i |=> arvalid_o && $stable(araddr_o) &&
              $stable(arlen_o), clk_i, !rst_ni)
  `TPU_ASSERT(WrStable_A, wr_valid_o && !wr_ready_i |=> wr_valid_o && $stable(wr_addr_o) &&
              $stable(wr_data_o), clk_i, !rst_ni)
  `TPU_ASSERT_NEVER(RNoBurst_A, rvalid_i && bf_empty, clk_i, !rst_ni)
  `TPU_ASSERT_NEVER(DataOverflow_A, rvalid_i && data_full, clk_i, !rst_ni)
  `TPU_ASSERT(CreditRange_A, {{(32-CredW){1'b0}}, credit_q} <= 32'(BufBeats), clk_i, !rst_ni)
  `TPU_ASSERT_NEVER(ArCross4k_A, arvalid_o && (({20'd0, araddr_o[11:0]} +
                    ({24'd0, arlen_o} + 32'd1) * 32'(DmaDataW / 8)) > 32'h1000), clk_i, !rst_ni)
  `TPU_ASSERT_INIT(PowerOfTwo_A, (ArrayN & (ArrayN - 1)) == 0 && (DmaDataW & (DmaDataW - 1)) == 0)
  `TPU_ASSERT_INIT(BufHoldsBurst_A, MaxBeats >= 1 && MaxBeats <= BufBeats)

endmodule
