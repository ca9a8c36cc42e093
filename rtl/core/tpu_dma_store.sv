// STORE engine: UB / ACC -> host memory over AXI4 writes (AWID set by the top).
//
// Three decoupled parts:
//  * AW: tpu_dma_burst_gen splits the instruction into bursts; up to MaxOutB bursts may be
//    outstanding (AW issued, B not yet received). AW never waits for data.
//  * local read: rows are requested from the datapath (dma_rd port) as long as the row buffer
//    has room for the response (responses come in request order without backpressure); rows
//    are converted to beats (a row may span several beats or a beat hold several rows) into the
//    W beat buffer.
//  * W: beats go out for bursts whose AW has been accepted, in AW order, wlast on the last beat.
// B responses arrive in order (one AWID); the instruction is done when the B of its last burst
// arrives. A failing B (SLVERR/DECERR) is reported on err_o with its row's address and the
// instruction's host address; the data of the failing burst was still sent in full.
//
// Cycle costs: accept -> first AW valid 2 cycles; local read request the cycle after accept;
// one W beat per cycle once data is buffered; done_o one cycle after the last B.
`include "tpu_assert.svh"

module tpu_dma_store #(
  parameter int unsigned ArrayN      = 16,
  parameter int unsigned DmaDataW    = 128,
  parameter int unsigned RowBufDepth = 8,
  parameter int unsigned WBufBeats   = 16,
  parameter int unsigned MaxOutB     = 16,
  parameter int unsigned DescDepth   = 4
) (
  input  logic                  clk_i,
  input  logic                  rst_ni,
  input  logic                  stop_i,

  input  logic                  valid_i,
  output logic                  ready_o,
  input  tpu_isa_pkg::store_t   instr_i,
  input  logic [31:0]           pc_i,
  output logic                  done_o,
  output logic                  idle_o,
  output logic                  err_o,
  output logic [31:0]           err_addr_o,
  output logic [31:0]           err_pc_o,

  output logic                  awvalid_o,
  input  logic                  awready_i,
  output logic [31:0]           awaddr_o,
  output logic [7:0]            awlen_o,
  output logic                  wvalid_o,
  input  logic                  wready_i,
  output logic [DmaDataW-1:0]   wdata_o,
  output logic                  wlast_o,
  input  logic                  bvalid_i,
  output logic                  bready_o,
  input  logic [1:0]            bresp_i,

  output logic                  rd_req_valid_o,
  input  logic                  rd_req_ready_i,
  output logic [1:0]            rd_mem_o,
  output logic [19:0]           rd_addr_o,
  input  logic                  rd_rsp_valid_i,
  input  logic [32*ArrayN-1:0]  rd_rsp_data_i
);

  localparam int unsigned RowW   = 32 * ArrayN;
  localparam int unsigned UbW    = 8 * ArrayN;
  localparam int unsigned BW     = DmaDataW;
  localparam int unsigned USub   = (UbW < BW) ? BW / UbW : 1;
  localparam int unsigned UBpr   = (UbW > BW) ? UbW / BW : 1;
  localparam int unsigned ASub   = (RowW < BW) ? BW / RowW : 1;
  localparam int unsigned ABpr   = (RowW > BW) ? RowW / BW : 1;
  localparam int unsigned SubW   = (USub > 1) ? $clog2(USub) : 1;
  localparam int unsigned BprW   = (ABpr > 1) ? $clog2(ABpr) : 1;
  localparam int unsigned LogUbRow  = $clog2(ArrayN);
  localparam int unsigned LogAccRow = $clog2(4 * ArrayN);
  localparam int unsigned RcW    = $clog2(RowBufDepth + 1);
  localparam int unsigned ObW    = $clog2(MaxOutB + 1);
  localparam int unsigned IfW    = $clog2(DescDepth + 2);

  // ---------------------------------------------------------------------------------------------
  // Accept
  // ---------------------------------------------------------------------------------------------
  logic [1:0]  i_mem;
  logic [19:0] i_local;
  logic [31:0] i_host;
  logic [15:0] i_rows, i_rbytes, i_rph;
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
  assign i_rph    = i_is_acc ? (i_rbytes >> LogAccRow) : (i_rbytes >> LogUbRow);
  assign i_nrows  = {16'd0, i_rows} * {16'd0, i_rph};

  logic gen_idle, desc_full, accept;
  assign ready_o = gen_idle && !desc_full;
  assign accept  = valid_i && ready_o;

  logic        gen_valid, gen_last, gen_take;
  logic [31:0] gen_addr, gen_row;
  logic [8:0]  gen_beats;

  tpu_dma_burst_gen #(.DmaDataW(DmaDataW)) u_gen (
    .clk_i, .rst_ni,
    .start_i(accept), .host_addr_i(i_host), .rows_i(i_rows), .row_bytes_i(i_rbytes),
    .host_stride_i(i_stride), .idle_o(gen_idle),
    .burst_valid_o(gen_valid), .burst_addr_o(gen_addr), .burst_beats_o(gen_beats),
    .burst_last_o(gen_last), .burst_row_o(gen_row), .burst_take_i(gen_take)
  );

  logic [31:0] gen_pc_q;
  always_ff @(posedge clk_i) begin
    if (!rst_ni)     gen_pc_q <= '0;
    else if (accept) gen_pc_q <= pc_i;
  end

  // ---------------------------------------------------------------------------------------------
  // AW
  // ---------------------------------------------------------------------------------------------
  logic             aw_valid_q, aw_last_q;
  logic [31:0]      aw_addr_q, aw_pc_q, aw_row_q;
  logic [7:0]       aw_len_q;
  logic [ObW-1:0]   ob_q;        // bursts loaded into AW and not yet answered on B
  logic             aw_fire, b_fire;

  assign gen_take = gen_valid && !stop_i && (!aw_valid_q || awready_i) &&
                    (ob_q != ObW'(MaxOutB));
  assign aw_fire  = aw_valid_q && awready_i;
  assign b_fire   = bvalid_i;     // bready = 1

  always_ff @(posedge clk_i) begin
    if (!rst_ni) begin
      aw_valid_q <= 1'b0;
      aw_addr_q  <= '0;
      aw_len_q   <= '0;
      aw_last_q  <= 1'b0;
      aw_pc_q    <= '0;
      aw_row_q   <= '0;
    end else begin
      if (awready_i) aw_valid_q <= 1'b0;
      if (gen_take) begin
        aw_valid_q <= 1'b1;
        aw_addr_q  <= gen_addr;
        aw_len_q   <= 8'(gen_beats - 9'd1);
        aw_last_q  <= gen_last;
        aw_pc_q    <= gen_pc_q;
        aw_row_q   <= gen_row;
      end
    end
  end

  tpu_counter #(.Width(ObW)) u_ob (
    .clk_i, .rst_ni, .clr_i(1'b0), .incr_i(ObW'(gen_take)), .decr_i(ObW'(b_fire)), .q_o(ob_q)
  );

  assign awvalid_o = aw_valid_q;
  assign awaddr_o  = aw_addr_q;
  assign awlen_o   = aw_len_q;
  assign bready_o  = 1'b1;

  // bursts whose AW was accepted: W lengths (popped at wlast) and B tags (popped at B)
  logic       wl_empty, wl_full, wl_pop;
  logic [7:0] wl_len;
  tpu_fifo #(.Width(8), .Depth(MaxOutB)) u_wlen (
    .clk_i, .rst_ni, .flush_i(1'b0),
    .push_i(aw_fire), .wdata_i(aw_len_q), .pop_i(wl_pop),
    .rdata_o(wl_len), .empty_o(wl_empty), .full_o(wl_full), .count_o()
  );

  logic        bt_empty, bt_full;
  logic [64:0] bt_rdata;      // {last, row addr, pc}
  tpu_fifo #(.Width(65), .Depth(MaxOutB)) u_btag (
    .clk_i, .rst_ni, .flush_i(1'b0),
    .push_i(aw_fire), .wdata_i({aw_last_q, aw_row_q, aw_pc_q}), .pop_i(b_fire),
    .rdata_o(bt_rdata), .empty_o(bt_empty), .full_o(bt_full), .count_o()
  );

  assign err_o      = b_fire && bresp_i[1];
  assign err_addr_o = bt_rdata[63:32];
  assign err_pc_o   = bt_rdata[31:0];

  // ---------------------------------------------------------------------------------------------
  // Local read requests
  // ---------------------------------------------------------------------------------------------
  logic        desc_empty, desc_pop;
  logic [53:0] desc_rdata;
  tpu_fifo #(.Width(54), .Depth(DescDepth)) u_desc (
    .clk_i, .rst_ni, .flush_i(1'b0),
    .push_i(accept), .wdata_i({i_mem, i_local, i_nrows}), .pop_i(desc_pop),
    .rdata_o(desc_rdata), .empty_o(desc_empty), .full_o(desc_full), .count_o()
  );

  logic [1:0]  d_mem;
  logic [19:0] d_local;
  logic [31:0] d_nrows;
  assign {d_mem, d_local, d_nrows} = desc_rdata;

  logic [31:0]    ridx_q;
  logic [RcW-1:0] rcnt_q;     // rows requested and not yet converted (in flight + buffered)
  logic           req_fire, row_pop;
  assign rd_req_valid_o = !desc_empty && (rcnt_q != RcW'(RowBufDepth));
  assign rd_mem_o       = d_mem;
  assign rd_addr_o      = d_local + ridx_q[19:0];
  assign req_fire       = rd_req_valid_o && rd_req_ready_i;
  assign desc_pop       = req_fire && (ridx_q == d_nrows - 32'd1);

  always_ff @(posedge clk_i) begin
    if (!rst_ni) begin
      ridx_q <= '0;
    end else begin
      if (req_fire) ridx_q <= desc_pop ? 32'd0 : ridx_q + 32'd1;
    end
  end
  tpu_counter #(.Width(RcW)) u_rcnt (
    .clk_i, .rst_ni, .clr_i(1'b0), .incr_i(RcW'(req_fire)), .decr_i(RcW'(row_pop)), .q_o(rcnt_q)
  );

  // memory kind of each requested row, and the returned rows
  logic            mk_empty, mk_full, mk_acc;
  logic            rb_empty, rb_full;
  logic [RowW-1:0] rb_row;
  tpu_fifo #(.Width(1), .Depth(RowBufDepth)) u_rowkind (
    .clk_i, .rst_ni, .flush_i(1'b0),
    .push_i(req_fire), .wdata_i(d_mem == 2'(tpu_isa_pkg::MemAcc)), .pop_i(row_pop),
    .rdata_o(mk_acc), .empty_o(mk_empty), .full_o(mk_full), .count_o()
  );
  tpu_fifo #(.Width(RowW), .Depth(RowBufDepth)) u_rows (
    .clk_i, .rst_ni, .flush_i(1'b0),
    .push_i(rd_rsp_valid_i), .wdata_i(rd_rsp_data_i), .pop_i(row_pop),
    .rdata_o(rb_row), .empty_o(rb_empty), .full_o(rb_full), .count_o()
  );

  // ---------------------------------------------------------------------------------------------
  // Rows -> beats
  // ---------------------------------------------------------------------------------------------
  logic            wb_push, wb_pop, wb_empty, wb_full;
  logic [BW-1:0]   wb_wdata, wb_rdata;
  logic [SubW-1:0] sub_q;      // rows packed into the current beat
  logic [BprW-1:0] bcnt_q;     // beats already taken from the current row
  logic [BW-1:0]   pack_q, pack_d;
  logic [SubW-1:0] sub_n1;
  logic [BprW-1:0] bpr_n1;
  logic            step;

  assign sub_n1 = mk_acc ? SubW'(ASub - 1) : SubW'(USub - 1);
  assign bpr_n1 = mk_acc ? BprW'(ABpr - 1) : BprW'(UBpr - 1);

  // a step consumes (part of) the head row; it needs W-buffer room whenever it completes a beat
  logic beat_done;
  assign beat_done = (bcnt_q != '0) || (bpr_n1 != '0) || (sub_q == sub_n1);
  assign step      = !rb_empty && (!beat_done || !wb_full);
  assign row_pop   = step && (bcnt_q == bpr_n1);
  assign wb_push   = step && beat_done;

  // beat slice of a wide row
  logic [BW-1:0] wide_beat;
  if (RowW > BW) begin : g_wide
    assign wide_beat = rb_row[bcnt_q*BW +: BW];
  end else begin : g_narrow
    assign wide_beat = BW'(rb_row);
  end

  // packing narrow rows into a beat
  logic [BW-1:0] pack_acc, pack_ub;
  if (ASub > 1) begin : g_pack_acc
    always_comb begin
      pack_acc = pack_q;
      pack_acc[sub_q*RowW +: RowW] = rb_row;
    end
  end else begin : g_no_pack_acc
    assign pack_acc = pack_q;
  end
  if (USub > 1) begin : g_pack_ub
    always_comb begin
      pack_ub = pack_q;
      pack_ub[sub_q*UbW +: UbW] = rb_row[UbW-1:0];
    end
  end else begin : g_no_pack_ub
    assign pack_ub = pack_q;
  end
  assign pack_d = mk_acc ? pack_acc : pack_ub;

  always_comb begin
    wb_wdata = wide_beat;
    if (mk_acc && ASub > 1)  wb_wdata = pack_d;
    if (!mk_acc && USub > 1) wb_wdata = pack_d;
    if (!mk_acc && USub == 1 && UBpr == 1) wb_wdata = BW'(rb_row[UbW-1:0]);
  end

  always_ff @(posedge clk_i) begin
    if (!rst_ni) begin
      sub_q  <= '0;
      bcnt_q <= '0;
      pack_q <= '0;
    end else if (step) begin
      if (row_pop) begin
        bcnt_q <= '0;
        sub_q  <= (sub_q == sub_n1) ? '0 : sub_q + SubW'(1);
        pack_q <= pack_d;
      end else begin
        bcnt_q <= bcnt_q + BprW'(1);
      end
    end
  end

  tpu_fifo #(.Width(BW), .Depth(WBufBeats)) u_wbuf (
    .clk_i, .rst_ni, .flush_i(1'b0),
    .push_i(wb_push), .wdata_i(wb_wdata), .pop_i(wb_pop),
    .rdata_o(wb_rdata), .empty_o(wb_empty), .full_o(wb_full), .count_o()
  );

  // ---------------------------------------------------------------------------------------------
  // W
  // ---------------------------------------------------------------------------------------------
  logic [7:0] wcnt_q;
  logic       w_fire;
  assign wvalid_o = !wl_empty && !wb_empty;
  assign wdata_o  = wb_rdata;
  assign wlast_o  = (wcnt_q == wl_len);
  assign w_fire   = wvalid_o && wready_i;
  assign wb_pop   = w_fire;
  assign wl_pop   = w_fire && wlast_o;

  always_ff @(posedge clk_i) begin
    if (!rst_ni)     wcnt_q <= '0;
    else if (w_fire) wcnt_q <= wlast_o ? 8'd0 : wcnt_q + 8'd1;
  end

  // ---------------------------------------------------------------------------------------------
  // done / idle
  // ---------------------------------------------------------------------------------------------
  logic           done_q;
  logic [IfW-1:0] inflight_q;
  always_ff @(posedge clk_i) begin
    if (!rst_ni) begin
      done_q     <= 1'b0;
    end else begin
      done_q     <= b_fire && bt_rdata[64];
    end
  end
  tpu_counter #(.Width(IfW)) u_inflight (
    .clk_i, .rst_ni, .clr_i(1'b0), .incr_i(IfW'(accept)), .decr_i(IfW'(done_q)), .q_o(inflight_q)
  );
  assign done_o = done_q;
  assign idle_o = (inflight_q == '0);

  logic unused_s;
  assign unused_s = ^{bresp_i[0], wl_full, bt_full, mk_empty, mk_full, rb_full,
                      instr_i.rsvd124, instr_i.rsvd14, instr_i.hdr};

  // ---------------------------------------------------------------------------------------------
  // Assertions
  // ---------------------------------------------------------------------------------------------
  `TPU_ASSERT(AwStable_A, awvalid_o && !awready_i |=> awvalid_o && $stable(awaddr_o) &&
              $stable(awlen_o), clk_i, !rst_ni)
  `TPU_ASSERT(WStable_A, wvalid_o && !wready_i |=> wvalid_o && $stable(wdata_o) &&
              $stable(wlast_o), clk_i, !rst_ni)
  `TPU_ASSERT(RdReqStable_A, rd_req_valid_o && !rd_req_ready_i |=> rd_req_valid_o &&
              $stable(rd_addr_o) && $stable(rd_mem_o), clk_i, !rst_ni)
  `TPU_ASSERT_NEVER(BUnexpected_A, bvalid_i && bt_empty, clk_i, !rst_ni)
  `TPU_ASSERT_NEVER(RowOverflow_A, rd_rsp_valid_i && rb_full, clk_i, !rst_ni)
  `TPU_ASSERT_NEVER(RowNoRequest_A, rd_rsp_valid_i && mk_empty, clk_i, !rst_ni)
  `TPU_ASSERT_NEVER(AwCross4k_A, awvalid_o && (({20'd0, awaddr_o[11:0]} +
                    ({24'd0, awlen_o} + 32'd1) * 32'(DmaDataW / 8)) > 32'h1000), clk_i, !rst_ni)
  `TPU_ASSERT_INIT(PowerOfTwo_A, (ArrayN & (ArrayN - 1)) == 0 && (DmaDataW & (DmaDataW - 1)) == 0)

endmodule
