// Datapath: unified buffer (UB), weight buffer (WB), accumulator memory (ACC), and the compute
// engine (tpu_compute: weight shifter, MXU, activation unit) behind the compute engine interface,
// with the transpose unit (tpu_transpose, TRANSPOSE) and the vector unit (tpu_vpu, VECTOR) that
// tpu_compute dispatches; while busy each owns the engine-side ports it uses (see "Aux units").
//
// Memory ports (default build: tpu_ram_2r2w each; see "FPGA memories" below):
//   UB   read 0: MATMUL activations   read 1: DMA   write 0: ACTIVATE results   write 1: DMA
//   WB   read 0: LOADW                read 1: DMA   write 0: unused             write 1: DMA
//   ACC  read 0: accumulate/ACTIVATE  read 1: DMA   write 0: MATMUL results     write 1: DMA
// With EnableBf16 the UB and WB are each two banks by row parity (tpu_ram_pair): port 0 then
// reads or writes a row pair (2r, 2r+1) in one cycle, which a bf16 MATMUL (one bf16 row = one
// row pair per cycle), a bf16 LOADW and a bf16 ACTIVATE need; a single-row access (int8, DMA)
// uses one bank. With EnableBf16 = 0 they are single memories, as in the int8-only design.
// The DMA has its own ports, so it never takes a cycle from the MXU and vice versa:
//   dma_wr: always ready; the row is written at the end of the handshake cycle.
//   dma_rd: always ready; the response (valid + data) follows exactly one cycle after the
//           request, in request order, without backpressure. UB/WB rows come back in the low
//           8N bits, the rest zero. A request for mem = 3 answers zeros.
// Ordering between the DMA engines and the compute engine is the command processor's (tokens).
//
// FPGA memories (FpgaRam = 1, default when the macro TPU_FPGA_RAM is defined, as the FPGA flows
// in scripts/fpga/ do): no FPGA block RAM has two read and two write ports, so each memory is
// instead one tpu_ram_1r1w (one read port, one write port: maps to iCE40/ECP5/Xilinx block RAM)
// and the compute engine and the DMA share its ports, the compute engine first:
//   dma_wr: not ready in a cycle where the compute engine writes the addressed memory
//           (UB: ACTIVATE results, ACC: MATMUL results; WB is written by the DMA only).
//   dma_rd: not ready in a cycle where the compute engine reads the addressed memory; an
//           accepted request is answered exactly one cycle later, as above.
// The compute engine consumes its read data the cycle after each read, so sharing the read
// register is safe. The MXU streams exactly as in the default build; only DMA rows wait. The
// compute engine never waits for the DMA while it holds a port, so this cannot deadlock.
// FpgaRam = 0 (simulation default) keeps the 2R2W memories and the always-ready DMA ports.
//
// Aux units: TRANSPOSE reads and writes the UB through the engine ports (read 0 / write 0);
// VECTOR reads operand a through ACC read 0, operand b through ACC read 1 and writes through ACC
// write 0. ACC read 1 is the DMA's: while the vector unit reads b, dma_rd_req_ready_o is low for
// an ACC request (the same rule as the FPGA build's shared port; only a STORE from the ACC that
// runs beside a VECTOR waits). In the FPGA build the ACC has a second copy (same writes) whose
// only reader is operand b. EnableBf16 = 0 leaves the vector unit out (the decoder rejects VECTOR).
`include "tpu_assert.svh"

module tpu_datapath #(
  parameter int unsigned ArrayN   = 16,
  parameter int unsigned UbDepth  = 32768,
  parameter int unsigned WbDepth  = 4096,
  parameter int unsigned AccDepth = 4096,
  parameter int unsigned ActLanes = ArrayN,  // requantize lanes (tpu_act_unit)
  parameter bit          EnableBf16 = 1'b1,  // bf16 MXU mode, fp32 ACTIVATE, vector unit (0: int8-only)
  parameter bit          EnableLut  = 1'b1,  // ACTIVATE `lut` (256-entry int8 table)
`ifdef TPU_FPGA_RAM
  parameter bit          FpgaRam  = 1'b1
`else
  parameter bit          FpgaRam  = 1'b0
`endif
) (
  input  logic                  clk_i,
  input  logic                  rst_ni,
  // compute engine interface
  input  logic                  cmp_valid_i,
  output logic                  cmp_ready_o,
  input  tpu_isa_pkg::instr_t   cmp_instr_i,
  output logic                  cmp_done_o,
  output logic                  cmp_idle_o,
  // DMA -> local memory, one row per handshake
  input  logic                  dma_wr_valid_i,
  output logic                  dma_wr_ready_o,
  input  logic [1:0]            dma_wr_mem_i,
  input  logic [19:0]           dma_wr_addr_i,
  input  logic [32*ArrayN-1:0]  dma_wr_data_i,
  // local memory -> DMA: request, then response in request order, no backpressure
  input  logic                  dma_rd_req_valid_i,
  output logic                  dma_rd_req_ready_o,
  input  logic [1:0]            dma_rd_mem_i,
  input  logic [19:0]           dma_rd_addr_i,
  output logic                  dma_rd_rsp_valid_o,
  output logic [32*ArrayN-1:0]  dma_rd_rsp_data_o,
  // performance events, one bit per cycle
  output logic                  perf_mxu_active_o,
  output logic                  perf_weight_stall_o,
  output logic                  perf_weight_shift_o,
  output logic                  perf_act_busy_o
);

  localparam int unsigned N     = ArrayN;
  localparam int unsigned UbAw  = $clog2(UbDepth);
  localparam int unsigned WbAw  = $clog2(WbDepth);
  localparam int unsigned AccAw = $clog2(AccDepth);

  // ---------------------------------------------------------------------------------------------
  // Engine-side memory ports
  // ---------------------------------------------------------------------------------------------
  logic             ub_rd_en, ub_wr_en, wb_rd_en, acc_rd_en, acc_wr_en;
  logic [UbAw-1:0]  ub_rd_addr, ub_wr_addr;
  logic [WbAw-1:0]  wb_rd_addr;
  logic [AccAw-1:0] acc_rd_addr, acc_wr_addr;
  logic             ub_rd_pair, ub_wr_pair, wb_rd_pair;  // row pair accesses (bf16)
  logic [16*N-1:0]  ub_rd_data, ub_wr_data, wb_rd_data;
  logic [32*N-1:0]  acc_rd_data, acc_wr_data;
  // the compute engine's side of them (muxed with the aux units below)
  logic             cmp_ub_rd_en, cmp_ub_wr_en, cmp_acc_rd_en, cmp_acc_wr_en;
  logic             cmp_ub_rd_pair, cmp_ub_wr_pair;
  logic [UbAw-1:0]  cmp_ub_rd_addr, cmp_ub_wr_addr;
  logic [AccAw-1:0] cmp_acc_rd_addr, cmp_acc_wr_addr;
  logic [16*N-1:0]  cmp_ub_wr_data;
  logic [32*N-1:0]  cmp_acc_wr_data;
  logic             cmp_perf_act_busy;
  // aux units
  logic                aux_go_tr, aux_go_vec;
  tpu_isa_pkg::instr_t aux_instr;
  logic                tr_busy, tr_done, vec_busy, vec_done;
  logic                vec_a_rd_en, vec_b_rd_en, vec_wr_en;
  logic [AccAw-1:0]    vec_a_rd_addr, vec_b_rd_addr, vec_wr_addr;
  logic [32*N-1:0]     vec_wr_data, acc_b_rd_data;

  tpu_compute #(
    .ArrayN   (ArrayN),
    .UbDepth  (UbDepth),
    .WbDepth  (WbDepth),
    .AccDepth (AccDepth),
    .ActLanes (ActLanes),
    .EnableBf16 (EnableBf16),
    .EnableLut  (EnableLut)
  ) u_compute (
    .clk_i,
    .rst_ni,
    .cmp_valid_i,
    .cmp_ready_o,
    .cmp_instr_i,
    .cmp_done_o,
    .cmp_idle_o,
    .ub_rd_en_o          (cmp_ub_rd_en),
    .ub_rd_addr_o        (cmp_ub_rd_addr),
    .ub_rd_pair_o        (cmp_ub_rd_pair),
    .ub_rd_data_i        (ub_rd_data),
    .ub_wr_en_o          (cmp_ub_wr_en),
    .ub_wr_addr_o        (cmp_ub_wr_addr),
    .ub_wr_pair_o        (cmp_ub_wr_pair),
    .ub_wr_data_o        (cmp_ub_wr_data),
    .wb_rd_en_o          (wb_rd_en),
    .wb_rd_addr_o        (wb_rd_addr),
    .wb_rd_pair_o        (wb_rd_pair),
    .wb_rd_data_i        (wb_rd_data),
    .acc_rd_en_o         (cmp_acc_rd_en),
    .acc_rd_addr_o       (cmp_acc_rd_addr),
    .acc_rd_data_i       (acc_rd_data),
    .acc_wr_en_o         (cmp_acc_wr_en),
    .acc_wr_addr_o       (cmp_acc_wr_addr),
    .acc_wr_data_o       (cmp_acc_wr_data),
    .perf_mxu_active_o,
    .perf_weight_stall_o,
    .perf_weight_shift_o,
    .perf_act_busy_o     (cmp_perf_act_busy),
    .aux_go_tr_o         (aux_go_tr),
    .aux_go_vec_o        (aux_go_vec),
    .aux_instr_o         (aux_instr),
    .aux_busy_i          (tr_busy || vec_busy),
    .aux_done_i          (tr_done || vec_done)
  );

  // ---------------------------------------------------------------------------------------------
  // Aux units: transpose (UB) and vector (ACC) units, dispatched by tpu_compute
  // ---------------------------------------------------------------------------------------------
  tpu_isa_pkg::transpose_t aux_tr;
  tpu_isa_pkg::vector_t    aux_vec;
  assign aux_tr  = aux_instr;
  assign aux_vec = aux_instr;
  // Header, reserved bits and the address bits above the depths are the decoder's.
  logic unused_aux;
  assign unused_aux = ^{aux_tr, aux_vec};

  logic            tr_rd_en, tr_wr_en, tr_pair;
  logic [UbAw-1:0] tr_rd_addr, tr_wr_addr;
  logic [16*N-1:0] tr_wr_data;

  tpu_transpose #(
    .ArrayN  (ArrayN),
    .UbDepth (UbDepth)
  ) u_transpose (
    .clk_i,
    .rst_ni,
    .go_i          (aux_go_tr),
    .src_i         (aux_tr.src_addr[UbAw-1:0]),
    .dst_i         (aux_tr.dst_addr[UbAw-1:0]),
    .rows_i        (aux_tr.rows),
    .bf16_i        (EnableBf16 && aux_tr.bf16),
    .ub_rd_en_o    (tr_rd_en),
    .ub_rd_addr_o  (tr_rd_addr),
    .ub_rd_data_i  (ub_rd_data),
    .ub_wr_en_o    (tr_wr_en),
    .ub_wr_addr_o  (tr_wr_addr),
    .ub_wr_data_o  (tr_wr_data),
    .ub_pair_o     (tr_pair),
    .busy_o        (tr_busy),
    .done_o        (tr_done)
  );

  if (EnableBf16) begin : g_vpu
    tpu_vpu #(
      .ArrayN   (ArrayN),
      .AccDepth (AccDepth)
    ) u_vpu (
      .clk_i,
      .rst_ni,
      .go_i        (aux_go_vec),
      .op_i        (aux_vec.op),
      .dst_i       (aux_vec.dst_addr[AccAw-1:0]),
      .a_i         (aux_vec.a_addr[AccAw-1:0]),
      .b_i         (aux_vec.b_addr[AccAw-1:0]),
      .rows_i      (aux_vec.rows),
      .scalar_i    (aux_vec.scalar),
      .a_rd_en_o   (vec_a_rd_en),
      .a_rd_addr_o (vec_a_rd_addr),
      .a_rd_data_i (acc_rd_data),
      .b_rd_en_o   (vec_b_rd_en),
      .b_rd_addr_o (vec_b_rd_addr),
      .b_rd_data_i (acc_b_rd_data),
      .wr_en_o     (vec_wr_en),
      .wr_addr_o   (vec_wr_addr),
      .wr_data_o   (vec_wr_data),
      .busy_o      (vec_busy),
      .done_o      (vec_done)
    );
  end else begin : g_no_vpu
    assign vec_a_rd_en   = 1'b0;
    assign vec_a_rd_addr = '0;
    assign vec_b_rd_en   = 1'b0;
    assign vec_b_rd_addr = '0;
    assign vec_wr_en     = 1'b0;
    assign vec_wr_addr   = '0;
    assign vec_wr_data   = '0;
    assign vec_busy      = 1'b0;
    assign vec_done      = 1'b0;
    logic unused_vec;
    assign unused_vec = ^{aux_go_vec, aux_vec, acc_b_rd_data};
  end

  // Engine-side ports: the aux unit in flight, else the compute engine (never both: tpu_compute
  // holds back whatever would touch the same memory while an aux unit is busy).
  assign ub_rd_en    = cmp_ub_rd_en || tr_rd_en;
  assign ub_rd_addr  = tr_rd_en ? tr_rd_addr : cmp_ub_rd_addr;
  assign ub_rd_pair  = tr_rd_en ? tr_pair : cmp_ub_rd_pair;
  assign ub_wr_pair  = tr_wr_en ? tr_pair : cmp_ub_wr_pair;
  assign ub_wr_en    = cmp_ub_wr_en || tr_wr_en;
  assign ub_wr_addr  = tr_wr_en ? tr_wr_addr : cmp_ub_wr_addr;
  assign ub_wr_data  = tr_wr_en ? tr_wr_data : cmp_ub_wr_data;
  assign acc_rd_en   = cmp_acc_rd_en || vec_a_rd_en;
  assign acc_rd_addr = vec_a_rd_en ? vec_a_rd_addr : cmp_acc_rd_addr;
  assign acc_wr_en   = cmp_acc_wr_en || vec_wr_en;
  assign acc_wr_addr = vec_wr_en ? vec_wr_addr : cmp_acc_wr_addr;
  assign acc_wr_data = vec_wr_en ? vec_wr_data : cmp_acc_wr_data;

  // PERF_ACT_BUSY counts all non-matrix work: ACTIVATE, TRANSPOSE and VECTOR.
  assign perf_act_busy_o = cmp_perf_act_busy || tr_busy || vec_busy;

  // ---------------------------------------------------------------------------------------------
  // DMA-side ports
  // ---------------------------------------------------------------------------------------------
  logic dma_wr_ub, dma_wr_wb, dma_wr_acc;
  logic dma_rd_ub, dma_rd_wb, dma_rd_acc;
  logic dma_rd_go;

  // Accepted DMA accesses per memory (valid, addressed memory and, for FPGA RAMs, port free).
  assign dma_wr_ub  = dma_wr_valid_i && dma_wr_ready_o && (dma_wr_mem_i == tpu_isa_pkg::MemUb);
  assign dma_wr_wb  = dma_wr_valid_i && dma_wr_ready_o && (dma_wr_mem_i == tpu_isa_pkg::MemWb);
  assign dma_wr_acc = dma_wr_valid_i && dma_wr_ready_o && (dma_wr_mem_i == tpu_isa_pkg::MemAcc);
  assign dma_rd_go  = dma_rd_req_valid_i && dma_rd_req_ready_o;
  assign dma_rd_ub  = dma_rd_go && (dma_rd_mem_i == tpu_isa_pkg::MemUb);
  assign dma_rd_wb  = dma_rd_go && (dma_rd_mem_i == tpu_isa_pkg::MemWb);
  assign dma_rd_acc = dma_rd_go && (dma_rd_mem_i == tpu_isa_pkg::MemAcc);

  logic [8*N-1:0]  ub_dma_rd_data, wb_dma_rd_data;
  logic [32*N-1:0] acc_dma_rd_data;

  // ---------------------------------------------------------------------------------------------
  // Memories
  // ---------------------------------------------------------------------------------------------
  if (FpgaRam) begin : g_fpga_ram
    // One read and one write port per memory, compute engine first (see the header).
    assign dma_wr_ready_o     = !((dma_wr_mem_i == tpu_isa_pkg::MemUb)  && ub_wr_en) &&
                                !((dma_wr_mem_i == tpu_isa_pkg::MemAcc) && acc_wr_en);
    assign dma_rd_req_ready_o = !((dma_rd_mem_i == tpu_isa_pkg::MemUb)  && ub_rd_en) &&
                                !((dma_rd_mem_i == tpu_isa_pkg::MemWb)  && wb_rd_en) &&
                                !((dma_rd_mem_i == tpu_isa_pkg::MemAcc) && acc_rd_en);

    // Operand b of the vector unit: a second ACC copy with the same writes, read by it alone.
    if (EnableBf16) begin : g_acc_b
      tpu_ram_1r1w #(
        .Width (32 * N),
        .Depth (AccDepth)
      ) u_acc_b (
        .clk_i,
        .rst_ni,
        .rd_en_i   (vec_b_rd_en),
        .rd_addr_i (vec_b_rd_addr),
        .rd_data_o (acc_b_rd_data),
        .wr_en_i   (acc_wr_en || dma_wr_acc),
        .wr_addr_i (acc_wr_en ? acc_wr_addr : dma_wr_addr_i[AccAw-1:0]),
        .wr_data_i (acc_wr_en ? acc_wr_data : dma_wr_data_i)
      );
    end else begin : g_no_acc_b
      assign acc_b_rd_data = '0;
      logic unused_b_rd;
      assign unused_b_rd = ^{vec_b_rd_en, vec_b_rd_addr};
    end

    logic [32*N-1:0] acc_q;
    tpu_ram_1r1w #(
      .Width (32 * N),
      .Depth (AccDepth)
    ) u_acc (
      .clk_i,
      .rst_ni,
      .rd_en_i   (acc_rd_en || dma_rd_acc),
      .rd_addr_i (acc_rd_en ? acc_rd_addr : dma_rd_addr_i[AccAw-1:0]),
      .rd_data_o (acc_q),
      .wr_en_i   (acc_wr_en || dma_wr_acc),
      .wr_addr_i (acc_wr_en ? acc_wr_addr : dma_wr_addr_i[AccAw-1:0]),
      .wr_data_i (acc_wr_en ? acc_wr_data : dma_wr_data_i)
    );

    // Each consumer looks at its read data only the cycle after its own read.
    assign acc_rd_data     = acc_q;
    assign acc_dma_rd_data = acc_q;
  end else begin : g_sim_ram
    // The DMA has its own ports: always ready, except an ACC read while the vector unit reads
    // its operand b through ACC read 1.
    assign dma_wr_ready_o     = 1'b1;
    assign dma_rd_req_ready_o = !((dma_rd_mem_i == tpu_isa_pkg::MemAcc) && vec_b_rd_en);
    assign acc_b_rd_data      = acc_dma_rd_data;

    tpu_ram_2r2w #(
      .Width (32 * N),
      .Depth (AccDepth)
    ) u_acc (
      .clk_i,
      .rst_ni,
      .rd0_en_i   (acc_rd_en),
      .rd0_addr_i (acc_rd_addr),
      .rd0_data_o (acc_rd_data),
      .rd1_en_i   (dma_rd_acc || vec_b_rd_en),
      .rd1_addr_i (vec_b_rd_en ? vec_b_rd_addr : dma_rd_addr_i[AccAw-1:0]),
      .rd1_data_o (acc_dma_rd_data),
      .wr0_en_i   (acc_wr_en),
      .wr0_addr_i (acc_wr_addr),
      .wr0_data_i (acc_wr_data),
      .wr1_en_i   (dma_wr_acc),
      .wr1_addr_i (dma_wr_addr_i[AccAw-1:0]),
      .wr1_data_i (dma_wr_data_i)
    );
  end

  // UB and WB: the engine port moves a row or, in the bf16 modes, a row pair per cycle (banked by
  // row parity, tpu_ram_pair); the DMA moves single rows. FpgaRam shares each bank's ports as above.
  tpu_ram_pair #(
    .Width  (8 * N),
    .Depth  (UbDepth),
    .Pairs  (EnableBf16),
    .Shared (FpgaRam)
  ) u_ub (
    .clk_i,
    .rst_ni,
    .e_rd_en_i   (ub_rd_en),
    .e_rd_addr_i (ub_rd_addr),
    .e_rd_pair_i (ub_rd_pair),
    .e_rd_data_o (ub_rd_data),
    .e_wr_en_i   (ub_wr_en),
    .e_wr_addr_i (ub_wr_addr),
    .e_wr_pair_i (ub_wr_pair),
    .e_wr_data_i (ub_wr_data),
    .d_rd_en_i   (dma_rd_ub),
    .d_rd_addr_i (dma_rd_addr_i[UbAw-1:0]),
    .d_rd_data_o (ub_dma_rd_data),
    .d_wr_en_i   (dma_wr_ub),
    .d_wr_addr_i (dma_wr_addr_i[UbAw-1:0]),
    .d_wr_data_i (dma_wr_data_i[8*N-1:0])
  );
  tpu_ram_pair #(
    .Width  (8 * N),
    .Depth  (WbDepth),
    .Pairs  (EnableBf16),
    .Shared (FpgaRam)
  ) u_wb (
    .clk_i,
    .rst_ni,
    .e_rd_en_i   (wb_rd_en),
    .e_rd_addr_i (wb_rd_addr),
    .e_rd_pair_i (wb_rd_pair),
    .e_rd_data_o (wb_rd_data),
    .e_wr_en_i   (1'b0),
    .e_wr_addr_i ('0),
    .e_wr_pair_i (1'b0),
    .e_wr_data_i ('0),
    .d_rd_en_i   (dma_rd_wb),
    .d_rd_addr_i (dma_rd_addr_i[WbAw-1:0]),
    .d_rd_data_o (wb_dma_rd_data),
    .d_wr_en_i   (dma_wr_wb),
    .d_wr_addr_i (dma_wr_addr_i[WbAw-1:0]),
    .d_wr_data_i (dma_wr_data_i[8*N-1:0])
  );

  // ---------------------------------------------------------------------------------------------
  // DMA read response: one cycle after the request.
  // ---------------------------------------------------------------------------------------------
  logic       rsp_valid_q;
  logic [1:0] rsp_mem_q;

  always_ff @(posedge clk_i) begin
    if (!rst_ni) rsp_valid_q <= 1'b0;
    else         rsp_valid_q <= dma_rd_go;
  end
  always_ff @(posedge clk_i) begin
    if (dma_rd_go) rsp_mem_q <= dma_rd_mem_i;
  end

  always_comb begin
    case (rsp_mem_q)
      tpu_isa_pkg::MemUb:  dma_rd_rsp_data_o = {{(24*N){1'b0}}, ub_dma_rd_data};
      tpu_isa_pkg::MemWb:  dma_rd_rsp_data_o = {{(24*N){1'b0}}, wb_dma_rd_data};
      tpu_isa_pkg::MemAcc: dma_rd_rsp_data_o = acc_dma_rd_data;
      default:             dma_rd_rsp_data_o = '0;
    endcase
  end
  assign dma_rd_rsp_valid_o = rsp_valid_q;

  // Row addresses are validated against the depths upstream; the high bits are always zero.
  logic unused_dma_addr;
  assign unused_dma_addr = ^{dma_wr_addr_i >> UbAw, dma_wr_addr_i >> WbAw, dma_wr_addr_i >> AccAw,
                             dma_rd_addr_i >> UbAw, dma_rd_addr_i >> WbAw, dma_rd_addr_i >> AccAw};

  // ---------------------------------------------------------------------------------------------
  // Assertions
  // ---------------------------------------------------------------------------------------------
  `TPU_ASSERT_INIT(DepthsFitAddr_A, UbAw <= 20 && WbAw <= 20 && AccAw <= 20)
  `TPU_ASSERT_NEVER(DmaWrMem_A, dma_wr_valid_i && dma_wr_mem_i == 2'd3, clk_i, !rst_ni)
  `TPU_ASSERT_NEVER(DmaRdMem_A, dma_rd_req_valid_i && dma_rd_mem_i == 2'd3, clk_i, !rst_ni)
  `TPU_ASSERT_NEVER(DmaWrRange_A, (dma_wr_ub && dma_wr_addr_i >= 20'(UbDepth)) ||
                                  (dma_wr_wb && dma_wr_addr_i >= 20'(WbDepth)) ||
                                  (dma_wr_acc && dma_wr_addr_i >= 20'(AccDepth)), clk_i, !rst_ni)
  `TPU_ASSERT_NEVER(DmaRdRange_A, (dma_rd_ub && dma_rd_addr_i >= 20'(UbDepth)) ||
                                  (dma_rd_wb && dma_rd_addr_i >= 20'(WbDepth)) ||
                                  (dma_rd_acc && dma_rd_addr_i >= 20'(AccDepth)), clk_i, !rst_ni)
  `TPU_ASSERT_KNOWN(DmaRdRspValidKnown_A, dma_rd_rsp_valid_o, clk_i, !rst_ni)
  // The aux units and the compute engine never drive the same memory port in one cycle.
  `TPU_ASSERT_NEVER(AuxUbConflict_A, (tr_rd_en && cmp_ub_rd_en) || (tr_wr_en && cmp_ub_wr_en),
                    clk_i, !rst_ni)
  `TPU_ASSERT_NEVER(AuxAccConflict_A, (vec_a_rd_en && cmp_acc_rd_en) ||
                    (vec_wr_en && cmp_acc_wr_en), clk_i, !rst_ni)
  `TPU_ASSERT_NEVER(AuxBothBusy_A, tr_busy && vec_busy, clk_i, !rst_ni)

endmodule
