`include "tpu_assert.svh"
// Instruction decoder and validator (purely combinational). Applies the rules of
// docs/architecture.md "Validation" in order; the first failing rule decides the cause.
// Within rule 4 the fields are checked in the order the contract lists them:
//   LOAD/STORE: mem, rows, row_bytes, host_addr, host_stride;  MATMUL/ACTIVATE: rows;
//   FENCE: host_addr;  TRANSPOSE: rows (1 .. ArrayN), src_addr even, dst_addr even (bf16);
//   VECTOR: op (defined), rows, then the overlap rule (an element-wise destination range equals
//   a source range or does not overlap it; b only for ops that read b; info = lsb of dst_addr).
// Within rule 5 the order is the contract's too (MATMUL: UB then ACC; ACTIVATE: ACC, UB, bias,
// qparam; TRANSPOSE: source then destination, row pairs in bf16; VECTOR: dst (one row for
// COLSUM), a, then b for ops that read b). FAULT_INFO for a range [a, a+n) that exceeds depth D is the first row out of range,
// max(a, D).
// ISA 1.1 bf16 modes (LOADW/MATMUL/ACTIVATE bit 14): with EnableBf16 = 0 the bit is reserved
// (rule 2, FAULT_INFO 14). Otherwise a bf16 instruction's UB/WB address must be even (rule 4,
// after `rows`; FAULT_INFO = lsb of the address field) and its UB/WB range counts row pairs
// (rule 5: LOADW wb_addr + 2N, MATMUL/ACTIVATE ub_addr + 2*rows); bf16 ACTIVATE does not
// check qparam_addr. LOADW `transpose` is always implemented.
// ISA 1.2 ACTIVATE `lut` (bit 15): with EnableLut = 0 the bit is reserved (rule 2, FAULT_INFO 15).
// Otherwise `lut` with `bf16` is ILLEGAL_FIELD (rule 4, after `rows`; FAULT_INFO 15) and the
// qparam range grows by the table rows (rule 5: qparam_addr + 2 + LutRows).
module tpu_decode #(
  parameter int unsigned ArrayN   = 16,
  parameter int unsigned UbDepth  = 32768,
  parameter int unsigned WbDepth  = 4096,
  parameter int unsigned AccDepth = 4096,
  parameter int unsigned DmaDataW = 128,
  parameter bit          EnableBf16 = 1'b1,
  parameter bit          EnableLut  = 1'b1
) (
  input  tpu_isa_pkg::instr_t instr_i,
  input  logic [31:0]  win_base_i,
  input  logic [31:0]  win_last_i,
  output logic         fault_o,
  output logic [3:0]   cause_o,
  output logic [31:0]  info_o,
  output logic [1:0]   queue_o      // tpu_isa_pkg::queue_e
);

  localparam int unsigned BeatBytes = DmaDataW / 8;
  // ACC rows of the ACTIVATE lookup table: 256 bytes, 4*ArrayN per row, at least one row.
  localparam int unsigned LutRows   = (ArrayN >= 64) ? 1 : 64 / ArrayN;
  localparam int unsigned UbRowB    = ArrayN;
  localparam int unsigned AccRowB   = 4 * ArrayN;
  localparam int unsigned LogBeat   = $clog2(BeatBytes);
  localparam int unsigned LogUbRow  = $clog2(UbRowB);
  localparam int unsigned LogAccRow = $clog2(AccRowB);
  // row_bytes must be a multiple of max(row size, beat); both powers of two.
  localparam int unsigned LogUbAlign  = (LogUbRow > LogBeat) ? LogUbRow : LogBeat;
  localparam int unsigned LogAccAlign = (LogAccRow > LogBeat) ? LogAccRow : LogBeat;

  localparam logic [1:0] MemUb  = 2'(tpu_isa_pkg::MemUb);
  localparam logic [1:0] MemWb  = 2'(tpu_isa_pkg::MemWb);
  localparam logic [1:0] MemAcc = 2'(tpu_isa_pkg::MemAcc);

  localparam logic [3:0] CauseOpcode = 4'(tpu_isa_pkg::FaultIllegalOpcode);
  localparam logic [3:0] CauseField  = 4'(tpu_isa_pkg::FaultIllegalField);
  localparam logic [3:0] CauseRange  = 4'(tpu_isa_pkg::FaultLocalRange);
  localparam logic [3:0] CauseWindow = 4'(tpu_isa_pkg::FaultDmaWindow);

  logic [7:0] opcode;
  assign opcode = instr_i.hdr.opcode;

  // The instruction seen as each kind (the same bits, named by the generated structs). STORE has
  // LOAD's layout (asserted below), so one view serves both DMA instructions.
  tpu_isa_pkg::load_t     ld;
  tpu_isa_pkg::loadw_t    lw;
  tpu_isa_pkg::matmul_t   mm;
  tpu_isa_pkg::activate_t act;
  tpu_isa_pkg::fence_t    fc;
  assign ld  = instr_i;
  assign lw  = instr_i;
  assign mm  = instr_i;
  assign act = instr_i;
  assign fc  = instr_i;

  logic is_load, is_store, is_loadw, is_matmul, is_act, is_nop, is_fence, is_dma;
  assign is_load   = (opcode == 8'(tpu_isa_pkg::OpLoad));
  assign is_store  = (opcode == 8'(tpu_isa_pkg::OpStore));
  assign is_loadw  = (opcode == 8'(tpu_isa_pkg::OpLoadw));
  assign is_matmul = (opcode == 8'(tpu_isa_pkg::OpMatmul));
  assign is_act    = (opcode == 8'(tpu_isa_pkg::OpActivate));
  assign is_nop    = (opcode == 8'(tpu_isa_pkg::OpNop));
  assign is_fence  = (opcode == 8'(tpu_isa_pkg::OpFence));
  assign is_dma    = is_load || is_store;
  logic is_tr, is_vec;
  assign is_tr  = (opcode == 8'(tpu_isa_pkg::OpTranspose));
  assign is_vec = (opcode == 8'(tpu_isa_pkg::OpVector)) && EnableBf16;  // no vector unit: illegal

  // Rule 2: reserved bits.
  logic [127:0] rsv_mask, rsv_bits;
  always_comb begin
    rsv_mask = '0;
    if (is_load)   rsv_mask = tpu_isa_pkg::LOAD_RESERVED_MASK;
    if (is_store)  rsv_mask = tpu_isa_pkg::STORE_RESERVED_MASK;
    if (is_loadw)  rsv_mask = tpu_isa_pkg::LOADW_RESERVED_MASK;
    if (is_matmul) rsv_mask = tpu_isa_pkg::MATMUL_RESERVED_MASK;
    if (is_act)    rsv_mask = tpu_isa_pkg::ACTIVATE_RESERVED_MASK;
    if (is_nop)    rsv_mask = tpu_isa_pkg::NOP_RESERVED_MASK;
    if (is_fence)  rsv_mask = tpu_isa_pkg::FENCE_RESERVED_MASK;
    if (is_tr)     rsv_mask = tpu_isa_pkg::TRANSPOSE_RESERVED_MASK;
    if (is_vec)    rsv_mask = tpu_isa_pkg::VECTOR_RESERVED_MASK;
    // A build without the bf16 modes (FEATURES.BF16 = 0): their bit is reserved.
    if (!EnableBf16 && (is_loadw || is_matmul || is_act || is_tr)) rsv_mask[14] = 1'b1;
    // A build without the lookup table (FEATURES.LUT = 0): ACTIVATE `lut` is reserved.
    if (!EnableLut && is_act) rsv_mask[tpu_isa_pkg::ACTIVATE_LUT_LSB] = 1'b1;
  end
  assign rsv_bits = instr_i & rsv_mask;

  logic [6:0] rsv_lsb;
  always_comb begin
    rsv_lsb = '0;
    for (int i = 127; i >= 0; i--) begin
      if (rsv_bits[i]) rsv_lsb = 7'(i);
    end
  end

  // Rule 3: dependency flags. Bit positions of the header flags.
  localparam int unsigned PopPrev  = tpu_isa_pkg::HDR_POP_PREV_LSB;
  localparam int unsigned PopNext  = tpu_isa_pkg::HDR_POP_NEXT_LSB;
  localparam int unsigned PushPrev = tpu_isa_pkg::HDR_PUSH_PREV_LSB;
  localparam int unsigned PushNext = tpu_isa_pkg::HDR_PUSH_NEXT_LSB;

  logic [127:0] dep_bad;
  always_comb begin
    dep_bad = '0;
    if (is_load) begin
      dep_bad[PopPrev]  = instr_i.hdr.pop_prev;
      dep_bad[PushPrev] = instr_i.hdr.push_prev;
    end
    if (is_store) begin
      dep_bad[PopNext]  = instr_i.hdr.pop_next;
      dep_bad[PushNext] = instr_i.hdr.push_next;
    end
    if (is_fence) begin
      dep_bad[PopPrev]  = instr_i.hdr.pop_prev;
      dep_bad[PopNext]  = instr_i.hdr.pop_next;
      dep_bad[PushPrev] = instr_i.hdr.push_prev;
      dep_bad[PushNext] = instr_i.hdr.push_next;
    end
  end
  logic [6:0] dep_lsb;
  always_comb begin
    dep_lsb = '0;
    for (int i = 15; i >= 0; i--) begin
      if (dep_bad[i]) dep_lsb = 7'(i);
    end
  end

  // LOAD / STORE fields (same layout for both).
  logic [1:0]  d_mem;
  logic [19:0] d_local;
  logic [31:0] d_host;
  logic [15:0] d_rows;
  logic [15:0] d_rbytes;
  logic [23:0] d_stride;
  assign d_mem    = ld.mem;
  assign d_local  = ld.local_addr;
  assign d_host   = ld.host_addr;
  assign d_rows   = ld.rows;
  assign d_rbytes = ld.row_bytes;
  assign d_stride = ld.host_stride;

  logic d_is_acc;
  assign d_is_acc = (d_mem == MemAcc);

  logic        mem_bad, rbytes_bad, host_bad, stride_bad;
  logic [15:0] align_mask;
  assign mem_bad    = is_load ? (d_mem != MemUb && d_mem != MemWb && d_mem != MemAcc)
                              : (d_mem != MemUb && d_mem != MemAcc);
  assign align_mask = d_is_acc ? 16'((32'd1 << LogAccAlign) - 1) : 16'((32'd1 << LogUbAlign) - 1);
  assign rbytes_bad = (d_rbytes == 16'd0) || ((d_rbytes & align_mask) != 16'd0);
  assign host_bad   = (d_host[LogBeat-1:0] != '0);
  assign stride_bad = (d_stride[LogBeat-1:0] != '0);

  // local rows touched
  logic [15:0] rows_per_host_row;
  logic [31:0] d_nrows;
  logic [32:0] d_end;
  logic [31:0] d_depth;
  assign rows_per_host_row = d_is_acc ? (d_rbytes >> LogAccRow) : (d_rbytes >> LogUbRow);
  assign d_nrows = d_rows * rows_per_host_row;
  assign d_end   = {13'd0, d_local} + {1'b0, d_nrows};
  always_comb begin
    d_depth = 32'(UbDepth);
    if (d_mem == MemWb)  d_depth = 32'(WbDepth);
    if (d_mem == MemAcc) d_depth = 32'(AccDepth);
  end

  // host byte range
  logic [40:0] d_span, d_last;
  assign d_span = ({25'd0, d_rows} - 41'd1) * {17'd0, d_stride};
  assign d_last = {9'd0, d_host} + d_span + {25'd0, d_rbytes} - 41'd1;

  // COMPUTE fields
  // bf16 modes: UB/WB rows counted in pairs (the reserved-bit rule already rejected the bits when
  // EnableBf16 = 0).
  logic [19:0] w_addr;
  logic        w_bf16;
  logic [16:0] w_rows;
  assign w_addr = lw.wb_addr;
  assign w_bf16 = lw.bf16;
  assign w_rows = w_bf16 ? 17'(2 * ArrayN) : 17'(ArrayN);
  logic [19:0] m_ub, m_acc;
  logic [15:0] m_rows;
  logic        m_bf16;
  logic [16:0] m_ub_rows;
  assign m_ub   = mm.ub_addr;
  assign m_acc  = mm.acc_addr;
  assign m_rows = mm.rows;
  assign m_bf16 = mm.bf16;
  assign m_ub_rows = m_bf16 ? {m_rows, 1'b0} : {1'b0, m_rows};
  logic [19:0] a_acc, a_ub, a_bias, a_qp;
  logic [15:0] a_rows;
  logic        a_has_bias, a_bf16, a_lut;
  logic [16:0] a_qp_rows;   // multiplier, shift (and table) rows
  logic [16:0] a_ub_rows;
  assign a_bf16    = act.bf16;
  assign a_lut     = act.lut;
  assign a_qp_rows = a_lut ? 17'(2 + LutRows) : 17'd2;
  assign a_ub_rows = a_bf16 ? {a_rows, 1'b0} : {1'b0, a_rows};
  assign a_acc  = act.acc_addr;
  assign a_ub   = act.ub_addr;
  assign a_rows = act.rows;
  assign a_bias = act.bias_addr;
  assign a_qp   = act.qparam_addr;
  assign a_has_bias = act.bias;
  logic [31:0] f_host;
  assign f_host = fc.host_addr;
  logic [32:0] f_last;
  assign f_last = {1'b0, f_host} + 33'd3;

  // TRANSPOSE / VECTOR fields
  tpu_isa_pkg::transpose_t tr;
  tpu_isa_pkg::vector_t    vc;
  assign tr = instr_i;
  assign vc = instr_i;
  logic [16:0] t_src_n, t_dst_n;   // UB rows read / written
  assign t_src_n = tr.bf16 ? {tr.rows, 1'b0} : {1'b0, tr.rows};
  assign t_dst_n = tr.bf16 ? 17'(2 * ArrayN) : 17'(ArrayN);
  logic v_colsum, v_reads_b, v_op_bad, v_overlap;
  assign v_op_bad  = (vc.op > 4'(tpu_isa_pkg::VopImax));
  assign v_colsum  = (vc.op == 4'(tpu_isa_pkg::VopColsum));
  assign v_reads_b = (vc.op == 4'(tpu_isa_pkg::VopAdd)) || (vc.op == 4'(tpu_isa_pkg::VopSub)) ||
                     (vc.op == 4'(tpu_isa_pkg::VopMul)) || (vc.op == 4'(tpu_isa_pkg::VopAxpy)) ||
                     (vc.op == 4'(tpu_isa_pkg::VopMax)) || (vc.op == 4'(tpu_isa_pkg::VopSelect));
  // [dst, dst+rows) and [src, src+rows) overlap without being equal
  function automatic logic bad_overlap(input logic [19:0] dst, input logic [19:0] src,
                                       input logic [15:0] n);
    bad_overlap = (dst != src) && ({1'b0, dst} < {1'b0, src} + {5'd0, n}) &&
                  ({1'b0, src} < {1'b0, dst} + {5'd0, n});
  endfunction
  assign v_overlap = !v_colsum && (bad_overlap(vc.dst_addr, vc.a_addr, vc.rows) ||
                                   (v_reads_b && bad_overlap(vc.dst_addr, vc.b_addr, vc.rows)));

  // a + n > depth  ->  first bad row max(a, depth)
  function automatic logic range_bad(input logic [19:0] a, input logic [16:0] n,
                                     input logic [31:0] depth);
    range_bad = ({12'd0, a} + {15'd0, n}) > depth;
  endfunction
  function automatic logic [31:0] first_bad(input logic [19:0] a, input logic [31:0] depth);
    first_bad = ({12'd0, a} > depth) ? {12'd0, a} : depth;
  endfunction

  localparam logic [31:0] UbD  = 32'(UbDepth);
  localparam logic [31:0] WbD  = 32'(WbDepth);
  localparam logic [31:0] AccD = 32'(AccDepth);

  always_comb begin
    fault_o = 1'b0;
    cause_o = 4'(tpu_isa_pkg::FaultNone);
    info_o  = '0;
    queue_o = 2'(tpu_isa_pkg::QueueCompute);
    if (is_load)  queue_o = 2'(tpu_isa_pkg::QueueLoad);
    if (is_store) queue_o = 2'(tpu_isa_pkg::QueueStore);
    if (is_fence) queue_o = 2'(tpu_isa_pkg::QueueCtrl);

    if (!(is_dma || is_loadw || is_matmul || is_act || is_nop || is_fence || is_tr || is_vec)) begin
      fault_o = 1'b1; cause_o = CauseOpcode; info_o = {24'd0, opcode};
    end else if (rsv_bits != '0) begin
      fault_o = 1'b1; cause_o = CauseField; info_o = {25'd0, rsv_lsb};
    end else if (dep_bad != '0) begin
      fault_o = 1'b1; cause_o = CauseField; info_o = {25'd0, dep_lsb};
    end else if (is_dma) begin
      // rule 4
      if (mem_bad) begin
        fault_o = 1'b1; cause_o = CauseField; info_o = 32'(tpu_isa_pkg::LOAD_MEM_LSB);
      end else if (d_rows == 16'd0) begin
        fault_o = 1'b1; cause_o = CauseField; info_o = 32'(tpu_isa_pkg::LOAD_ROWS_LSB);
      end else if (rbytes_bad) begin
        fault_o = 1'b1; cause_o = CauseField; info_o = 32'(tpu_isa_pkg::LOAD_ROW_BYTES_LSB);
      end else if (host_bad) begin
        fault_o = 1'b1; cause_o = CauseField; info_o = 32'(tpu_isa_pkg::LOAD_HOST_ADDR_LSB);
      end else if (stride_bad) begin
        fault_o = 1'b1; cause_o = CauseField; info_o = 32'(tpu_isa_pkg::LOAD_HOST_STRIDE_LSB);
      // rule 5
      end else if (d_end > {1'b0, d_depth}) begin
        fault_o = 1'b1; cause_o = CauseRange; info_o = first_bad(d_local, d_depth);
      // rule 6
      end else if (d_host < win_base_i || d_last > {9'd0, win_last_i}) begin
        fault_o = 1'b1; cause_o = CauseWindow; info_o = d_host;
      end
    end else if (is_loadw) begin
      if (w_bf16 && w_addr[0]) begin
        fault_o = 1'b1; cause_o = CauseField; info_o = 32'(tpu_isa_pkg::LOADW_WB_ADDR_LSB);
      end else if (range_bad(w_addr, w_rows, WbD)) begin
        fault_o = 1'b1; cause_o = CauseRange; info_o = first_bad(w_addr, WbD);
      end
    end else if (is_matmul) begin
      if (m_rows == 16'd0) begin
        fault_o = 1'b1; cause_o = CauseField; info_o = 32'(tpu_isa_pkg::MATMUL_ROWS_LSB);
      end else if (m_bf16 && m_ub[0]) begin
        fault_o = 1'b1; cause_o = CauseField; info_o = 32'(tpu_isa_pkg::MATMUL_UB_ADDR_LSB);
      end else if (range_bad(m_ub, m_ub_rows, UbD)) begin
        fault_o = 1'b1; cause_o = CauseRange; info_o = first_bad(m_ub, UbD);
      end else if (range_bad(m_acc, {1'b0, m_rows}, AccD)) begin
        fault_o = 1'b1; cause_o = CauseRange; info_o = first_bad(m_acc, AccD);
      end
    end else if (is_act) begin
      if (a_rows == 16'd0) begin
        fault_o = 1'b1; cause_o = CauseField; info_o = 32'(tpu_isa_pkg::ACTIVATE_ROWS_LSB);
      end else if (a_bf16 && a_lut) begin
        fault_o = 1'b1; cause_o = CauseField; info_o = 32'(tpu_isa_pkg::ACTIVATE_LUT_LSB);
      end else if (a_bf16 && a_ub[0]) begin
        fault_o = 1'b1; cause_o = CauseField; info_o = 32'(tpu_isa_pkg::ACTIVATE_UB_ADDR_LSB);
      end else if (range_bad(a_acc, {1'b0, a_rows}, AccD)) begin
        fault_o = 1'b1; cause_o = CauseRange; info_o = first_bad(a_acc, AccD);
      end else if (range_bad(a_ub, a_ub_rows, UbD)) begin
        fault_o = 1'b1; cause_o = CauseRange; info_o = first_bad(a_ub, UbD);
      end else if (a_has_bias && ({12'd0, a_bias} >= AccD)) begin
        fault_o = 1'b1; cause_o = CauseRange; info_o = {12'd0, a_bias};
      end else if (!a_bf16 && range_bad(a_qp, a_qp_rows, AccD)) begin
        fault_o = 1'b1; cause_o = CauseRange; info_o = first_bad(a_qp, AccD);
      end
    end else if (is_tr) begin
      if (tr.rows == 16'd0 || tr.rows > 16'(ArrayN)) begin
        fault_o = 1'b1; cause_o = CauseField; info_o = 32'(tpu_isa_pkg::TRANSPOSE_ROWS_LSB);
      end else if (tr.bf16 && tr.src_addr[0]) begin
        fault_o = 1'b1; cause_o = CauseField; info_o = 32'(tpu_isa_pkg::TRANSPOSE_SRC_ADDR_LSB);
      end else if (tr.bf16 && tr.dst_addr[0]) begin
        fault_o = 1'b1; cause_o = CauseField; info_o = 32'(tpu_isa_pkg::TRANSPOSE_DST_ADDR_LSB);
      end else if (range_bad(tr.src_addr, t_src_n, UbD)) begin
        fault_o = 1'b1; cause_o = CauseRange; info_o = first_bad(tr.src_addr, UbD);
      end else if (range_bad(tr.dst_addr, t_dst_n, UbD)) begin
        fault_o = 1'b1; cause_o = CauseRange; info_o = first_bad(tr.dst_addr, UbD);
      end
    end else if (is_vec) begin
      if (v_op_bad) begin
        fault_o = 1'b1; cause_o = CauseField; info_o = 32'(tpu_isa_pkg::VECTOR_OP_LSB);
      end else if (vc.rows == 16'd0) begin
        fault_o = 1'b1; cause_o = CauseField; info_o = 32'(tpu_isa_pkg::VECTOR_ROWS_LSB);
      end else if (v_overlap) begin
        fault_o = 1'b1; cause_o = CauseField; info_o = 32'(tpu_isa_pkg::VECTOR_DST_ADDR_LSB);
      end else if (range_bad(vc.dst_addr, v_colsum ? 17'd1 : {1'b0, vc.rows}, AccD)) begin
        fault_o = 1'b1; cause_o = CauseRange; info_o = first_bad(vc.dst_addr, AccD);
      end else if (range_bad(vc.a_addr, {1'b0, vc.rows}, AccD)) begin
        fault_o = 1'b1; cause_o = CauseRange; info_o = first_bad(vc.a_addr, AccD);
      end else if (v_reads_b && range_bad(vc.b_addr, {1'b0, vc.rows}, AccD)) begin
        fault_o = 1'b1; cause_o = CauseRange; info_o = first_bad(vc.b_addr, AccD);
      end
    end else if (is_fence) begin
      if (f_host[1:0] != 2'b00) begin
        fault_o = 1'b1; cause_o = CauseField; info_o = 32'(tpu_isa_pkg::FENCE_HOST_ADDR_LSB);
      end else if (f_host < win_base_i || f_last > {1'b0, win_last_i}) begin
        fault_o = 1'b1; cause_o = CauseWindow; info_o = f_host;
      end
    end
  end

  // STORE uses the LOAD field positions; make sure the spec keeps them identical.
  `TPU_ASSERT_INIT(StoreLayout_A,
                   tpu_isa_pkg::STORE_MEM_LSB == tpu_isa_pkg::LOAD_MEM_LSB &&
                   tpu_isa_pkg::STORE_ROWS_LSB == tpu_isa_pkg::LOAD_ROWS_LSB &&
                   tpu_isa_pkg::STORE_ROW_BYTES_LSB == tpu_isa_pkg::LOAD_ROW_BYTES_LSB &&
                   tpu_isa_pkg::STORE_HOST_ADDR_LSB == tpu_isa_pkg::LOAD_HOST_ADDR_LSB &&
                   tpu_isa_pkg::STORE_HOST_STRIDE_LSB == tpu_isa_pkg::LOAD_HOST_STRIDE_LSB &&
                   tpu_isa_pkg::STORE_LOCAL_ADDR_LSB == tpu_isa_pkg::LOAD_LOCAL_ADDR_LSB)
  `TPU_ASSERT_INIT(BeatAtLeastWord_A, DmaDataW >= 32)

  // Fields no rule looks at (reserved bits are checked through the masks above).
  logic unused_views;
  assign unused_views = ^{ld.rsvd124, ld.rsvd14, ld.hdr, lw.rsvd36, lw.rsvd15,
                          lw.rsvd13, lw.transpose, lw.hdr,
                          mm.rsvd72, mm.rsvd15, mm.swap, mm.accumulate, mm.hdr,
                          act.rsvd112, act.relu, act.hdr,
                          fc.rsvd96, fc.value, fc.rsvd13, fc.irq, fc.hdr,
                          tr.hdr, tr.rsvd72, tr.rsvd15, tr.rsvd12, vc.hdr, vc.rsvd92, vc.scalar};

endmodule
