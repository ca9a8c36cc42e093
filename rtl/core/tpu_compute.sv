// Compute engine: executes LOADW, MATMUL, ACTIVATE, TRANSPOSE, VECTOR and NOP from the compute queue
// (cmp_* engine interface, docs/architecture.md) on the MXU, the weight shifter and the
// activation unit, against the engine-side ports of UB, WB and ACC.
//
// Pipeline:
//   accept -> head register -> dispatch (in program order, one per cycle) to one of
//     shifter   LOADW:    reads the tile's WB rows (row N-1 first), one per cycle, N cycles; the
//                         rows feed the MXU's shadow registers the cycle after each read (int8
//                         weights sign-extended to 16 bits; bf16: one WB row pair per cycle;
//                         transpose: the MXU shifts the tile along its rows)
//     streamer  MATMUL:   reads one UB row (bf16: one UB row pair) per cycle; the row enters the
//                         MXU the next cycle with its mode; results: ACC read (accumulate) at
//                         MXU exit, ACC write one cycle later (bf16: fp32 add per word)
//     act seq.  ACTIVATE: reads mult, shift (and bias) rows, then one ACC row every P cycles
//                         (P = ArrayN/ActLanes, 1 at full width) through tpu_act_unit (P+1
//                         cycles) into UB; bf16: bias row, then one ACC row per cycle through
//                         the fp32 bias add, ReLU and bf16 rounding into a UB row pair
//     aux       TRANSPOSE / VECTOR: tpu_transpose and tpu_vpu, instantiated by tpu_datapath (they
//               own the memory ports while busy); this engine dispatches them (aux_go_*_o with the
//               head instruction on aux_instr_o) and retires them on aux_done_i.
//     NOP:      nothing
// Dispatch rules (what makes the overlap safe):
//   LOADW     when the shifter is free (idle or reading its last row this cycle). It may start
//             while MATMULs stream: tpu_mxu's shift front follows the swap wavefront, so the only
//             requirement is that no swap row enters during a feed, which in-order dispatch and
//             the MATMUL rule below guarantee.
//   MATMUL    when the streamer is free (idle or issuing its last row: zero-bubble back to back),
//             no ACTIVATE is in flight (it may write the UB rows this MATMUL reads), and, with
//             swap, the shifter is free (the tile finished shifting; counted as weight stall).
//             Accumulating MATMULs into the same ACC rows need no stall: the ACC
//             read-modify-write forwards the previous cycle's write.
//   ACTIVATE  when no MATMUL is outstanding (all its ACC writes done) and no ACTIVATE is in flight.
//   TRANSPOSE when no aux instruction is in flight, the streamer is idle (no MATMUL UB read
//             left) and no ACTIVATE is in flight (its UB writes are done).
//   VECTOR    when no aux instruction is in flight, no MATMUL is outstanding (all its ACC writes
//             done) and no ACTIVATE is in flight (its ACC reads done).
//   MATMUL and ACTIVATE also wait while an aux instruction is in flight (its UB/ACC writes may be
//   their operands, and it holds the memory ports). One aux instruction at a time, so they
//   complete in order.
// Completion: each unit completes its own instructions in order; a retire queue of instruction
// kinds in acceptance order turns per-unit completion counts into cmp_done_o pulses in acceptance
// order, at most one per cycle, after the instruction's last memory access.
`include "tpu_assert.svh"

module tpu_compute #(
  parameter int unsigned ArrayN   = 16,
  parameter int unsigned UbDepth  = 32768,
  parameter int unsigned WbDepth  = 4096,
  parameter int unsigned AccDepth = 4096,
  parameter int unsigned ActLanes = ArrayN,  // requantize lanes (tpu_act_unit)
  parameter bit          EnableBf16 = 1'b1,  // bf16 MXU mode and fp32 ACTIVATE (0: int8 only)
  parameter bit          EnableLut  = 1'b1,  // ACTIVATE `lut` (256-entry int8 table)
  localparam int unsigned UbAw    = $clog2(UbDepth),
  localparam int unsigned WbAw    = $clog2(WbDepth),
  localparam int unsigned AccAw   = $clog2(AccDepth)
) (
  input  logic                   clk_i,
  input  logic                   rst_ni,
  // compute engine interface
  input  logic                   cmp_valid_i,
  output logic                   cmp_ready_o,
  input  tpu_isa_pkg::instr_t    cmp_instr_i,
  output logic                   cmp_done_o,
  output logic                   cmp_idle_o,
  // UB: read (MATMUL activations), write (ACTIVATE results)
  output logic                   ub_rd_en_o,
  // (a pair access moves rows 2r, 2r+1 as {row 2r+1, row 2r}; a single row is in the low half)
  output logic [UbAw-1:0]        ub_rd_addr_o,
  output logic                   ub_rd_pair_o,
  input  logic [16*ArrayN-1:0]   ub_rd_data_i,
  output logic                   ub_wr_en_o,
  output logic [UbAw-1:0]        ub_wr_addr_o,
  output logic                   ub_wr_pair_o,
  output logic [16*ArrayN-1:0]   ub_wr_data_o,
  // WB: read (LOADW)
  output logic                   wb_rd_en_o,
  output logic [WbAw-1:0]        wb_rd_addr_o,
  output logic                   wb_rd_pair_o,
  input  logic [16*ArrayN-1:0]   wb_rd_data_i,
  // ACC: read (accumulate, ACTIVATE), write (MATMUL results)
  output logic                   acc_rd_en_o,
  output logic [AccAw-1:0]       acc_rd_addr_o,
  input  logic [32*ArrayN-1:0]   acc_rd_data_i,
  output logic                   acc_wr_en_o,
  output logic [AccAw-1:0]       acc_wr_addr_o,
  output logic [32*ArrayN-1:0]   acc_wr_data_o,
  // performance events
  output logic                   perf_mxu_active_o,
  output logic                   perf_weight_stall_o,
  output logic                   perf_weight_shift_o,
  output logic                   perf_act_busy_o,
  // TRANSPOSE / VECTOR units (tpu_transpose, tpu_vpu in tpu_datapath)
  output logic                   aux_go_tr_o,
  output logic                   aux_go_vec_o,
  output tpu_isa_pkg::instr_t    aux_instr_o,
  input  logic                   aux_busy_i,   // either unit busy (from its go to its done)
  input  logic                   aux_done_i    // the aux instruction in flight completes
);

  localparam int unsigned N           = ArrayN;
  localparam int unsigned CntW        = $clog2(ArrayN);
  localparam logic [CntW-1:0] LastCnt = CntW'(ArrayN - 1);
  // Enough retire entries to keep rows=1 MATMULs (about 2N+5 cycles from accept to done)
  // flowing at one per cycle.
  localparam int unsigned RetireDepth = 1 << $clog2(2 * ArrayN + 6);
  localparam int unsigned RtPtrW      = $clog2(RetireDepth);
  localparam int unsigned MxuTagW     = AccAw + 3;  // {bf16, last, accumulate, acc row}

  // Retire queue entry kinds.
  localparam logic [2:0] RtNop    = 3'd0;
  localparam logic [2:0] RtLoadw  = 3'd1;
  localparam logic [2:0] RtMatmul = 3'd2;
  localparam logic [2:0] RtAct    = 3'd3;
  localparam logic [2:0] RtAux    = 3'd4;  // TRANSPOSE, VECTOR

  function automatic logic [2:0] kind_of(input logic [7:0] opcode);
    case (opcode)
      tpu_isa_pkg::OpLoadw:     kind_of = RtLoadw;
      tpu_isa_pkg::OpMatmul:    kind_of = RtMatmul;
      tpu_isa_pkg::OpActivate:  kind_of = RtAct;
      tpu_isa_pkg::OpTranspose: kind_of = RtAux;
      tpu_isa_pkg::OpVector:    kind_of = RtAux;
      default:                  kind_of = RtNop;
    endcase
  endfunction

  // ---------------------------------------------------------------------------------------------
  // Head register and decode
  // ---------------------------------------------------------------------------------------------
  logic         head_valid_q;
  tpu_isa_pkg::instr_t head_q;
  logic [2:0]   head_kind;
  logic         head_go;      // the head instruction dispatches this cycle
  logic         accept;

  assign head_kind = kind_of(head_q.hdr.opcode);

  // The head seen as each compute instruction (the same bits, named by the generated structs).
  tpu_isa_pkg::loadw_t    head_lw;
  tpu_isa_pkg::matmul_t   head_mm;
  tpu_isa_pkg::activate_t head_act;
  assign head_lw  = head_q;
  assign head_mm  = head_q;
  assign head_act = head_q;

  // LOADW fields
  logic [WbAw-1:0]  lw_wb_addr;
  logic             lw_f_bf16, lw_f_tr;
  // MATMUL fields
  logic             mm_f_accum, mm_f_swap, mm_f_bf16;
  logic [UbAw-1:0]  mm_f_ub;
  logic [AccAw-1:0] mm_f_acc;
  logic [15:0]      mm_f_rows;
  // ACTIVATE fields
  logic             act_f_relu, act_f_bias, act_f_bf16, act_f_lut;
  logic [AccAw-1:0] act_f_acc, act_f_bias_addr, act_f_qp;
  logic [UbAw-1:0]  act_f_ub;
  logic [15:0]      act_f_rows;

  // Addresses were validated against the depths by the command processor: the low bits suffice.
  // The mode bits reach here only when EnableBf16 (the decoder faults them otherwise).
  assign lw_wb_addr      = head_lw.wb_addr[WbAw-1:0];
  assign lw_f_bf16       = EnableBf16 && head_lw.bf16;
  assign lw_f_tr         = head_lw.transpose;
  assign mm_f_bf16       = EnableBf16 && head_mm.bf16;
  assign act_f_bf16      = EnableBf16 && head_act.bf16;
  assign act_f_lut       = EnableLut && head_act.lut;
  assign mm_f_accum      = head_mm.accumulate;
  assign mm_f_swap       = head_mm.swap;
  assign mm_f_ub         = head_mm.ub_addr[UbAw-1:0];
  assign mm_f_acc        = head_mm.acc_addr[AccAw-1:0];
  assign mm_f_rows       = head_mm.rows;
  assign act_f_relu      = head_act.relu;
  assign act_f_bias      = head_act.bias;
  assign act_f_acc       = head_act.acc_addr[AccAw-1:0];
  assign act_f_ub        = head_act.ub_addr[UbAw-1:0];
  assign act_f_rows      = head_act.rows;
  assign act_f_bias_addr = head_act.bias_addr[AccAw-1:0];
  assign act_f_qp        = head_act.qparam_addr[AccAw-1:0];

  // Header flags, reserved bits and the unused high address bits are the command processor's.
  logic unused_head;
  assign unused_head = ^{head_q, head_lw, head_mm, head_act};

  // ---------------------------------------------------------------------------------------------
  // Unit state
  // ---------------------------------------------------------------------------------------------
  // shifter (LOADW)
  logic            lw_busy_q;
  logic [WbAw-1:0] lw_addr_q;
  logic [CntW-1:0] lw_cnt_q;
  logic            lw_last, lw_free;
  logic            lw_bf16_q, lw_tr_q;  // mode of the LOADW reading the WB
  logic            wt_valid_q;   // WB read data is a tile row for the MXU this cycle
  logic            wt_bf16_q, wt_tr_q;  // its mode

  // streamer (MATMUL)
  logic             mm_busy_q;
  logic [UbAw-1:0]  mm_ub_q;
  logic [AccAw-1:0] mm_acc_q;
  logic [15:0]      mm_left_q;
  logic             mm_accum_q, mm_swap_q, mm_bf16_q;
  logic             mm_last, mm_free;
  logic             iss_valid_q, iss_swap_q;   // UB read data is an activation row this cycle
  logic             iss_bf16_q;
  logic [MxuTagW-1:0] iss_tag_q;
  logic [RtPtrW:0]  mm_out_q;                  // MATMULs dispatched and not yet completed

  // activation path (ACTIVATE, tpu_act_seq)
  logic             act_busy;                  // dispatched and last UB row not yet written
  logic             act_rd_en;
  logic [AccAw-1:0] act_rd_addr;

  logic act_idle, mm_none;
  assign act_idle = !act_busy;
  assign mm_none  = (mm_out_q == '0);

  assign lw_last = lw_busy_q && (lw_cnt_q == LastCnt);
  assign lw_free = !lw_busy_q || lw_last;
  assign mm_last = mm_busy_q && (mm_left_q == 16'd1);
  assign mm_free = !mm_busy_q || mm_last;

  // ---------------------------------------------------------------------------------------------
  // Dispatch
  // ---------------------------------------------------------------------------------------------
  logic go_ok, aux_ok, head_is_tr;
  assign head_is_tr = (head_q.hdr.opcode == tpu_isa_pkg::OpTranspose);
  assign aux_ok     = !aux_busy_i && act_idle && (head_is_tr ? !mm_busy_q : mm_none);
  always_comb begin
    case (head_kind)
      RtLoadw:  go_ok = lw_free;
      RtMatmul: go_ok = mm_free && act_idle && (!mm_f_swap || lw_free) && !aux_busy_i;
      RtAct:    go_ok = act_idle && mm_none && !aux_busy_i;
      RtAux:    go_ok = aux_ok;
      default:  go_ok = 1'b1;
    endcase
  end
  assign head_go = head_valid_q && go_ok;

  logic go_lw, go_mm, go_act;
  assign go_lw  = head_go && (head_kind == RtLoadw);
  assign go_mm  = head_go && (head_kind == RtMatmul);
  assign go_act = head_go && (head_kind == RtAct);

  assign aux_go_tr_o  = head_go && (head_kind == RtAux) && head_is_tr;
  assign aux_go_vec_o = head_go && (head_kind == RtAux) && !head_is_tr;
  assign aux_instr_o  = head_q;

  // ---------------------------------------------------------------------------------------------
  // Retire queue
  // ---------------------------------------------------------------------------------------------
  logic [2:0]      rt_mem [RetireDepth];
  logic [RtPtrW:0] rt_wptr_q, rt_rptr_q;
  logic            rt_empty, rt_full;
  logic [2:0]      rt_head;
  logic [RtPtrW:0] cnt_lw_q, cnt_mm_q, cnt_act_q;  // completed, not yet retired
  logic [RtPtrW:0] cnt_aux_q;
  logic            ret_aux;
  logic            ev_lw, ev_mm, ev_act;            // unit completion events
  logic            ret_lw, ret_mm, ret_act;

  assign rt_empty = (rt_wptr_q == rt_rptr_q);
  assign rt_full  = (rt_wptr_q[RtPtrW] != rt_rptr_q[RtPtrW]) &&
                    (rt_wptr_q[RtPtrW-1:0] == rt_rptr_q[RtPtrW-1:0]);
  assign rt_head  = rt_mem[rt_rptr_q[RtPtrW-1:0]];

  always_comb begin
    case (rt_head)
      RtLoadw:  cmp_done_o = !rt_empty && (cnt_lw_q != '0);
      RtMatmul: cmp_done_o = !rt_empty && (cnt_mm_q != '0);
      RtAct:    cmp_done_o = !rt_empty && (cnt_act_q != '0);
      RtAux:    cmp_done_o = !rt_empty && (cnt_aux_q != '0);
      default:  cmp_done_o = !rt_empty;
    endcase
  end
  assign ret_lw  = cmp_done_o && (rt_head == RtLoadw);
  assign ret_mm  = cmp_done_o && (rt_head == RtMatmul);
  assign ret_act = cmp_done_o && (rt_head == RtAct);
  assign ret_aux = cmp_done_o && (rt_head == RtAux);

  assign cmp_ready_o = !rt_full && (!head_valid_q || head_go);
  assign cmp_idle_o  = rt_empty;
  assign accept      = cmp_valid_i && cmp_ready_o;

  always_ff @(posedge clk_i) begin
    if (accept) rt_mem[rt_wptr_q[RtPtrW-1:0]] <= kind_of(cmp_instr_i.hdr.opcode);
  end

  always_ff @(posedge clk_i) begin
    if (!rst_ni) begin
      rt_wptr_q    <= '0;
      rt_rptr_q    <= '0;
      head_valid_q <= 1'b0;
    end else begin
      if (accept)     rt_wptr_q <= rt_wptr_q + 1'b1;
      if (cmp_done_o) rt_rptr_q <= rt_rptr_q + 1'b1;
      if (accept)       head_valid_q <= 1'b1;
      else if (head_go) head_valid_q <= 1'b0;
    end
  end

  always_ff @(posedge clk_i) begin
    if (accept) head_q <= cmp_instr_i;
  end

  // engine events not yet retired, per engine
  tpu_counter #(.Width(RtPtrW + 1)) u_cnt_lw (
    .clk_i, .rst_ni, .clr_i(1'b0), .incr_i((RtPtrW+1)'(ev_lw)), .decr_i((RtPtrW+1)'(ret_lw)),
    .q_o(cnt_lw_q)
  );
  tpu_counter #(.Width(RtPtrW + 1)) u_cnt_mm (
    .clk_i, .rst_ni, .clr_i(1'b0), .incr_i((RtPtrW+1)'(ev_mm)), .decr_i((RtPtrW+1)'(ret_mm)),
    .q_o(cnt_mm_q)
  );
  tpu_counter #(.Width(RtPtrW + 1)) u_cnt_act (
    .clk_i, .rst_ni, .clr_i(1'b0), .incr_i((RtPtrW+1)'(ev_act)), .decr_i((RtPtrW+1)'(ret_act)),
    .q_o(cnt_act_q)
  );

  tpu_counter #(.Width(RtPtrW + 1)) u_cnt_aux (
    .clk_i, .rst_ni, .clr_i(1'b0), .incr_i((RtPtrW+1)'(aux_done_i)),
    .decr_i((RtPtrW+1)'(ret_aux)), .q_o(cnt_aux_q)
  );

  // ---------------------------------------------------------------------------------------------
  // Shifter (LOADW)
  // ---------------------------------------------------------------------------------------------
  always_ff @(posedge clk_i) begin
    if (!rst_ni) begin
      lw_busy_q  <= 1'b0;
      lw_cnt_q   <= '0;
      wt_valid_q <= 1'b0;
    end else begin
      wt_valid_q <= lw_busy_q;
      wt_bf16_q  <= lw_bf16_q;
      wt_tr_q    <= lw_tr_q;
      if (go_lw) begin
        lw_busy_q <= 1'b1;
        lw_cnt_q  <= '0;
      end else if (lw_busy_q) begin
        lw_cnt_q <= lw_cnt_q + 1'b1;
        if (lw_last) lw_busy_q <= 1'b0;
      end
    end
  end

  // Tile row N-1 goes first (bf16: row pair N-1, WB rows wb_addr+2N-2 and +2N-1).
  always_ff @(posedge clk_i) begin
    if (go_lw) begin
      lw_addr_q <= lw_f_bf16 ? (lw_wb_addr + WbAw'(2 * N - 2)) : (lw_wb_addr + WbAw'(N - 1));
      lw_bf16_q <= lw_f_bf16;
      lw_tr_q   <= lw_f_tr;
    end else if (lw_busy_q) begin
      lw_addr_q <= lw_addr_q - (lw_bf16_q ? WbAw'(2) : WbAw'(1));
    end
  end

  assign wb_rd_en_o   = lw_busy_q;
  assign wb_rd_addr_o = lw_addr_q;
  assign wb_rd_pair_o = lw_bf16_q;

  // The MXU takes 16-bit weights: a bf16 pair as it is, an int8 row sign-extended.
  logic [16*N-1:0] wt_data;
  always_comb begin
    for (int unsigned i = 0; i < N; i++) begin
      wt_data[16*i +: 16] = {{8{wb_rd_data_i[8*i+7]}}, wb_rd_data_i[8*i +: 8]};
    end
    if (EnableBf16 && wt_bf16_q) wt_data = wb_rd_data_i;
  end
  assign ev_lw        = lw_last;  // all WB reads of the tile done

  // ---------------------------------------------------------------------------------------------
  // Streamer (MATMUL)
  // ---------------------------------------------------------------------------------------------
  always_ff @(posedge clk_i) begin
    if (!rst_ni) begin
      mm_busy_q   <= 1'b0;
      iss_valid_q <= 1'b0;
      iss_swap_q  <= 1'b0;
      iss_bf16_q  <= 1'b0;
    end else begin
      iss_valid_q <= mm_busy_q;
      iss_swap_q  <= mm_busy_q && mm_swap_q;
      iss_bf16_q  <= mm_busy_q && mm_bf16_q;
      if (go_mm)        mm_busy_q <= 1'b1;
      else if (mm_last) mm_busy_q <= 1'b0;
    end
  end

  tpu_counter #(.Width(RtPtrW + 1)) u_mm_out (
    .clk_i, .rst_ni, .clr_i(1'b0), .incr_i((RtPtrW+1)'(go_mm)), .decr_i((RtPtrW+1)'(ev_mm)),
    .q_o(mm_out_q)
  );

  always_ff @(posedge clk_i) begin
    if (mm_busy_q) iss_tag_q <= {mm_bf16_q, mm_last, mm_accum_q, mm_acc_q};
    if (go_mm) begin
      mm_ub_q    <= mm_f_ub;
      mm_acc_q   <= mm_f_acc;
      mm_left_q  <= mm_f_rows;
      mm_accum_q <= mm_f_accum;
      mm_swap_q  <= mm_f_swap;
      mm_bf16_q  <= mm_f_bf16;
    end else if (mm_busy_q) begin
      mm_ub_q   <= mm_ub_q + (mm_bf16_q ? UbAw'(2) : UbAw'(1));
      mm_acc_q  <= mm_acc_q + 1'b1;
      mm_left_q <= mm_left_q - 16'd1;
      mm_swap_q <= 1'b0;  // swap travels with the first row only
    end
  end

  assign ub_rd_en_o   = mm_busy_q;
  assign ub_rd_addr_o = mm_ub_q;
  assign ub_rd_pair_o = mm_bf16_q;

  // The MXU takes 16-bit elements: a bf16 pair as it is, int8 byte k in the low byte of element k.
  logic [16*N-1:0] act_data;
  always_comb begin
    for (int unsigned i = 0; i < N; i++) act_data[16*i +: 16] = {8'd0, ub_rd_data_i[8*i +: 8]};
    if (EnableBf16 && iss_bf16_q) act_data = ub_rd_data_i;
  end

  // ---------------------------------------------------------------------------------------------
  // MXU
  // ---------------------------------------------------------------------------------------------
  logic               mxu_out_valid;
  logic [32*N-1:0]    mxu_out_data;
  logic [MxuTagW-1:0] mxu_out_tag;
  logic               mxu_busy;

  tpu_mxu #(
    .ArrayN     (ArrayN),
    .TagW       (MxuTagW),
    .EnableBf16 (EnableBf16)
  ) u_mxu (
    .clk_i,
    .rst_ni,
    .act_valid_i    (iss_valid_q),
    .act_swap_i     (iss_swap_q),
    .act_bf16_i     (iss_bf16_q),
    .act_data_i     (act_data),
    .act_tag_i      (iss_tag_q),
    .wt_valid_i     (wt_valid_q),
    .wt_transpose_i (wt_tr_q),
    .wt_data_i      (wt_data),
    .out_valid_o (mxu_out_valid),
    .out_data_o  (mxu_out_data),
    .out_tag_o   (mxu_out_tag),
    .busy_o      (mxu_busy)
  );

  // ---------------------------------------------------------------------------------------------
  // ACC writer: read (accumulate) when the row leaves the MXU, add and write one cycle later.
  // A write of the previous cycle is not yet in the read data: forward it.
  // ---------------------------------------------------------------------------------------------
  logic             o_bf16, o_last, o_accum;
  logic [AccAw-1:0] o_addr;
  assign {o_bf16, o_last, o_accum, o_addr} = mxu_out_tag;

  logic             w_valid_q, w_last_q, w_accum_q, w_bf16_q;
  logic [AccAw-1:0] w_addr_q;
  logic [32*N-1:0]  w_data_q;
  logic             fw_valid_q;
  logic [AccAw-1:0] fw_addr_q;
  logic [32*N-1:0]  fw_data_q;
  logic [32*N-1:0]  w_base, w_sum;

  always_ff @(posedge clk_i) begin
    if (!rst_ni) begin
      w_valid_q  <= 1'b0;
      fw_valid_q <= 1'b0;
    end else begin
      w_valid_q  <= mxu_out_valid;
      fw_valid_q <= w_valid_q;
    end
  end

  always_ff @(posedge clk_i) begin
    if (mxu_out_valid) begin
      w_last_q  <= o_last;
      w_accum_q <= o_accum;
      w_bf16_q  <= o_bf16;
      w_addr_q  <= o_addr;
      w_data_q  <= mxu_out_data;
    end
    if (w_valid_q) begin
      fw_addr_q <= w_addr_q;
      fw_data_q <= acc_wr_data_o;
    end
  end

  assign w_base = (fw_valid_q && (fw_addr_q == w_addr_q)) ? fw_data_q : acc_rd_data_i;
  // int8: 32-bit wrap-around; bf16: acc + s, one fp32 addition per word (docs/numerics.md). The
  // fp adders sit behind the mode test, so int8 rows do not evaluate them in simulation.
  always_comb begin
    if (EnableBf16 && w_bf16_q) begin
      for (int unsigned j = 0; j < N; j++) begin
        w_sum[32*j +: 32] = tpu_fp_pkg::fp32_add(w_base[32*j +: 32], w_data_q[32*j +: 32]);
      end
    end else begin
      for (int unsigned j = 0; j < N; j++) begin
        w_sum[32*j +: 32] = w_base[32*j +: 32] + w_data_q[32*j +: 32];
      end
    end
  end

  assign acc_wr_en_o   = w_valid_q;
  assign acc_wr_addr_o = w_addr_q;
  assign acc_wr_data_o = w_accum_q ? w_sum : w_data_q;
  assign ev_mm         = w_valid_q && w_last_q;

  // ---------------------------------------------------------------------------------------------
  // Activation path (ACTIVATE): parameter rows, ACC row reads, tpu_act_unit, UB writes
  // ---------------------------------------------------------------------------------------------
  tpu_act_seq #(
    .ArrayN(ArrayN), .UbDepth(UbDepth), .AccDepth(AccDepth), .ActLanes(ActLanes),
    .EnableBf16(EnableBf16), .EnableLut(EnableLut)
  ) u_act_seq (
    .clk_i, .rst_ni,
    .go_i(go_act), .acc_addr_i(act_f_acc), .ub_addr_i(act_f_ub), .rows_i(act_f_rows),
    .bias_en_i(act_f_bias), .relu_i(act_f_relu), .bf16_i(act_f_bf16), .lut_i(act_f_lut), .qparam_addr_i(act_f_qp),
    .bias_addr_i(act_f_bias_addr),
    .acc_rd_en_o(act_rd_en), .acc_rd_addr_o(act_rd_addr), .acc_rd_data_i,
    .ub_wr_en_o, .ub_wr_addr_o, .ub_wr_pair_o, .ub_wr_data_o,
    .busy_o(act_busy), .done_o(ev_act)
  );

  // ACC read port: the ACC writer (accumulate) and the activation sequencer never overlap.
  logic wr_rd_en;
  assign wr_rd_en      = mxu_out_valid && o_accum;
  assign acc_rd_en_o   = act_rd_en || wr_rd_en;
  assign acc_rd_addr_o = act_rd_en ? act_rd_addr : o_addr;

  // ---------------------------------------------------------------------------------------------
  // Performance events
  // ---------------------------------------------------------------------------------------------
  assign perf_mxu_active_o   = iss_valid_q;
  assign perf_weight_shift_o = lw_busy_q;
  assign perf_weight_stall_o = head_valid_q && (head_kind == RtMatmul) && mm_f_swap &&
                               mm_free && act_idle && !lw_free;
  assign perf_act_busy_o     = act_busy;

  // ---------------------------------------------------------------------------------------------
  // Assertions
  // ---------------------------------------------------------------------------------------------
  `TPU_ASSERT_INIT(ArrayNMin_A, ArrayN >= 2)
  `TPU_ASSERT_INIT(DepthsHoldTile_A, WbDepth >= ArrayN && AccDepth >= 2 && UbDepth >= 2)
  // Only compute-queue instructions arrive here.
  `TPU_ASSERT(ComputeOpcode_A, !accept ||
              cmp_instr_i.hdr.opcode inside {tpu_isa_pkg::OpLoadw, tpu_isa_pkg::OpMatmul,
                                       tpu_isa_pkg::OpActivate, tpu_isa_pkg::OpNop,
                                       tpu_isa_pkg::OpTranspose, tpu_isa_pkg::OpVector},
              clk_i, !rst_ni)
  `TPU_ASSERT(MatmulRows_A, !go_mm || mm_f_rows != '0, clk_i, !rst_ni)
  `TPU_ASSERT_NEVER(RetireOverflow_A, accept && rt_full, clk_i, !rst_ni)
  `TPU_ASSERT_NEVER(CompletionUnderflow_A,
                    (ret_lw && cnt_lw_q == '0) || (ret_mm && cnt_mm_q == '0) ||
                    (ret_act && cnt_act_q == '0) || (ret_aux && cnt_aux_q == '0), clk_i, !rst_ni)
  // Every completion belongs to an accepted, not yet retired instruction.
  `TPU_ASSERT_NEVER(SpuriousCompletion_A, (ev_lw || ev_mm || ev_act || aux_done_i) && rt_empty,
                    clk_i, !rst_ni)
  // The aux units own the UB ports while busy.
  // (A TRANSPOSE may run while the last MATMUL results go to the ACC; tpu_datapath checks the ACC.)
  `TPU_ASSERT_NEVER(AuxExclusiveUb_A, aux_busy_i && (ub_rd_en_o || ub_wr_en_o), clk_i, !rst_ni)
  // The ACC read port has one user at a time; ACTIVATE never overlaps MATMUL results.
  `TPU_ASSERT_NEVER(AccReadConflict_A, act_rd_en && wr_rd_en, clk_i, !rst_ni)
  `TPU_ASSERT_NEVER(ActOverlapsMatmul_A, act_busy && (mm_busy_q || iss_valid_q || w_valid_q),
                    clk_i, !rst_ni)
  // MATMUL never reads the UB while an ACTIVATE may still write it.
  `TPU_ASSERT_NEVER(UbReadDuringAct_A, ub_rd_en_o && act_busy, clk_i, !rst_ni)
  // A swap row never enters while a tile is fed (tpu_mxu's contract, checked here at the source).
  `TPU_ASSERT_NEVER(SwapDuringShift_A, iss_valid_q && iss_swap_q && wt_valid_q, clk_i, !rst_ni)
  `TPU_ASSERT_NEVER(MxuBusyWithoutMatmul_A, mxu_out_valid && mm_none, clk_i, !rst_ni)
  `TPU_ASSERT_KNOWN(DoneKnown_A, cmp_done_o, clk_i, !rst_ni)
  `TPU_ASSERT_KNOWN(ReadyKnown_A, cmp_ready_o, clk_i, !rst_ni)

  logic unused_mxu_busy;
  assign unused_mxu_busy = mxu_busy;

endmodule
