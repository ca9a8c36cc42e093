// Instruction fetch of the command processor: reads the ring from RING_HEAD's fetch pointer
// towards RING_TAIL in AXI read bursts into a prefetch buffer of FetchDepth instructions and
// offers them, in ring order, to decode.
//
// A burst is issued when the buffer (counting instructions in flight) has room for at least half
// of it or for everything up to RING_TAIL / the ring end / the 4 KiB boundary; an instruction
// reaches decode the cycle after its last beat arrives. rready is always 1: space is reserved
// before the burst is issued. A beat answered SLVERR/DECERR marks its instruction (instr_err_o).
`include "tpu_assert.svh"

module tpu_cmd_fetch #(
  parameter int unsigned DmaDataW   = 128,
  parameter int unsigned FetchDepth = 16   // prefetch buffer, instructions
) (
  input  logic                clk_i,
  input  logic                rst_ni,
  input  logic                halt_i,        // issue no new burst (fault or soft reset pending)

  input  logic [31:0]         ring_base_i,
  input  logic [31:0]         ring_size_i,
  input  logic [31:0]         ring_tail_i,

  // AXI read (ARID 0 is set by the top)
  output logic                f_arvalid_o,
  input  logic                f_arready_i,
  output logic [31:0]         f_araddr_o,
  output logic [7:0]          f_arlen_o,
  input  logic                f_rvalid_i,
  output logic                f_rready_o,
  input  logic [DmaDataW-1:0] f_rdata_i,
  input  logic [1:0]          f_rresp_i,
  input  logic                f_rlast_i,

  // to decode: the next instruction in ring order
  output logic                instr_valid_o,
  output tpu_isa_pkg::instr_t instr_o,
  output logic                instr_err_o,   // its fetch was answered with an AXI error
  input  logic                instr_pop_i
);

  localparam int unsigned BeatsPerInstr = (DmaDataW >= 128) ? 1 : 128 / DmaDataW;
  localparam int unsigned BpiW          = (BeatsPerInstr > 1) ? $clog2(BeatsPerInstr) : 1;
  localparam int unsigned MaxBurstInstr = 256 / BeatsPerInstr;
  localparam int unsigned FCntW         = $clog2(FetchDepth + 1);
  localparam int unsigned FifoCntW      = $clog2(FetchDepth + 1);

  logic [31:0] fptr_q;         // next instruction to fetch

  function automatic logic [31:0] ring_next(input logic [31:0] p, input logic [31:0] n,
                                            input logic [31:0] size);
    logic [32:0] s;
    s = {1'b0, p} + {1'b0, n};
    if (s >= {1'b0, size}) ring_next = 32'(s - {1'b0, size});
    else ring_next = s[31:0];
  endfunction

  logic              pf_push, pf_pop, pf_empty, pf_full;
  logic [FifoCntW-1:0] pf_count;
  logic [128:0]      pf_wdata, pf_rdata;   // {fetch error, instr}
  logic [FCntW-1:0]  f_inflight_q;         // instructions requested, not yet in the buffer

  logic              far_valid_q;
  logic [31:0]       far_addr_q;
  logic [7:0]        far_len_q;

  logic [31:0] f_addr, f_avail, f_to4k, f_n;
  logic [31:0] f_free;
  logic        f_issue;
  logic [31:0] f_runtail;  // instructions up to tail or the ring end

  assign f_addr  = ring_base_i + {fptr_q[27:0], 4'b0000};
  assign f_runtail = (fptr_q <= ring_tail_i) ? (ring_tail_i - fptr_q) : (ring_size_i - fptr_q);
  logic [12:0] f_to4k_bytes;
  assign f_to4k_bytes = 13'h1000 - {1'b0, f_addr[11:0]};
  assign f_to4k  = {23'd0, f_to4k_bytes[12:4]};
  assign f_free  = 32'(FetchDepth) - 32'(pf_count) - 32'(f_inflight_q);
  always_comb begin
    f_avail = f_runtail;
    if (f_to4k < f_avail) f_avail = f_to4k;
    if (32'(MaxBurstInstr) < f_avail) f_avail = 32'(MaxBurstInstr);
    f_n = f_avail;
    if (f_free < f_n) f_n = f_free;
  end

  // outstanding fetch bursts (each carries at least one instruction, so FetchDepth bound them)
  logic fb_push, fb_pop, fb_empty, fb_full;
  assign f_issue = !halt_i && (fptr_q != ring_tail_i) && (f_n != 32'd0) && !fb_full &&
                   (!far_valid_q || f_arready_i) &&
                   ((f_n == f_avail) || (f_n >= 32'(FetchDepth / 2)));

  always_ff @(posedge clk_i) begin
    if (!rst_ni) begin
      far_valid_q <= 1'b0;
      far_addr_q  <= '0;
      far_len_q   <= '0;
      fptr_q      <= '0;
    end else begin
      if (f_arready_i) far_valid_q <= 1'b0;
      if (f_issue) begin
        far_valid_q <= 1'b1;
        far_addr_q  <= f_addr;
        far_len_q   <= 8'(f_n * BeatsPerInstr - 1);
        fptr_q      <= ring_next(fptr_q, f_n, ring_size_i);
      end
    end
  end

  assign f_arvalid_o = far_valid_q;
  assign f_araddr_o  = far_addr_q;
  assign f_arlen_o   = far_len_q;
  assign f_rready_o  = 1'b1;   // space is reserved by the credit count

  assign fb_push = f_issue;
  assign fb_pop  = f_rvalid_i && f_rlast_i;

  logic [FCntW-1:0] fb_cnt_q;
  tpu_counter #(.Width(FCntW)) u_fb_cnt (
    .clk_i, .rst_ni, .clr_i(1'b0), .incr_i(FCntW'(fb_push)), .decr_i(FCntW'(fb_pop)),
    .q_o(fb_cnt_q)
  );
  assign fb_empty = (fb_cnt_q == '0);
  assign fb_full  = (fb_cnt_q == FCntW'(FetchDepth));

  // beat assembly
  logic [127:0]  asm_q;
  logic          asm_err_q;
  logic [BpiW-1:0] asm_cnt_q;
  logic          beat_err;
  logic          asm_last;
  logic [127:0]  asm_full;
  assign beat_err = f_rresp_i[1];
  assign asm_last = (asm_cnt_q == BpiW'(BeatsPerInstr - 1));

  if (BeatsPerInstr == 1) begin : g_asm1
    assign asm_full = f_rdata_i[127:0];
    logic unused_asm;
    assign unused_asm = ^asm_q;
    if (DmaDataW > 128) begin : g_unused
      logic unused_hi;
      assign unused_hi = ^f_rdata_i[DmaDataW-1:128];
    end
  end else begin : g_asmn
    always_comb begin
      asm_full = asm_q;
      asm_full[asm_cnt_q*DmaDataW +: DmaDataW] = f_rdata_i;
    end
  end

  always_ff @(posedge clk_i) begin
    if (!rst_ni) begin
      asm_q     <= '0;
      asm_err_q <= 1'b0;
      asm_cnt_q <= '0;
    end else if (f_rvalid_i) begin
      asm_q <= asm_full;
      if (asm_last) begin
        asm_cnt_q <= '0;
        asm_err_q <= 1'b0;
      end else begin
        asm_cnt_q <= asm_cnt_q + BpiW'(1);
        asm_err_q <= asm_err_q || beat_err;
      end
    end
  end

  assign pf_push  = f_rvalid_i && asm_last;
  assign pf_wdata = {asm_err_q || beat_err, asm_full};

  logic [FCntW-1:0] f_issued;
  assign f_issued = f_issue ? FCntW'(f_n) : FCntW'(0);
  tpu_counter #(.Width(FCntW)) u_f_inflight (
    .clk_i, .rst_ni, .clr_i(1'b0), .incr_i(f_issued), .decr_i(FCntW'(pf_push)),
    .q_o(f_inflight_q)
  );

  tpu_fifo #(.Width(129), .Depth(FetchDepth)) u_prefetch (
    .clk_i, .rst_ni, .flush_i(1'b0),
    .push_i(pf_push), .wdata_i(pf_wdata), .pop_i(pf_pop), .rdata_o(pf_rdata),
    .empty_o(pf_empty), .full_o(pf_full), .count_o(pf_count)
  );

  assign pf_pop        = instr_pop_i;
  assign instr_valid_o = !pf_empty;
  assign instr_o       = pf_rdata[127:0];
  assign instr_err_o   = pf_rdata[128];

  logic unused_f;
  assign unused_f = ^{f_rresp_i[0], f_to4k_bytes[3:0]};

  `TPU_ASSERT(FetchArStable_A, f_arvalid_o && !f_arready_i |=> f_arvalid_o && $stable(f_araddr_o)
              && $stable(f_arlen_o), clk_i, !rst_ni)
  `TPU_ASSERT_NEVER(FetchRNoBurst_A, f_rvalid_i && fb_empty, clk_i, !rst_ni)
  `TPU_ASSERT_NEVER(PrefetchOverflow_A, pf_push && pf_full, clk_i, !rst_ni)
  `TPU_ASSERT_INIT(FetchWidth_A, DmaDataW >= 32 && DmaDataW <= 128)
  `TPU_ASSERT_INIT(FetchDepthPow_A, FetchDepth >= 2 && FetchDepth <= 64)

endmodule
