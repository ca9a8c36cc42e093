// UART host link: a framed request/response protocol (docs/uart_protocol.md) that gives a PC
// access to the device registers (AXI4-Lite master) and to the board memory (native word port of
// tpu_axi_sram), with a CRC-8 on every frame, NACK on a bad checksum, the irq level in every
// response, and a run-time baud divisor.
//
//   request  (host -> board): A5 | cmd | seq | addr[31:0] LE | n | payload | crc8
//   response (board -> host): 5A | code | seq | status | payload | crc8
//   crc8: polynomial x^8+x^2+x+1 (0x07), init 0, no reflection, over everything after the sync byte.
//
// Stop-and-wait: the bridge takes one request, executes it and answers before it looks at the
// line again; bytes that arrive while it is busy are dropped (status.OVERRUN). A request that
// stalls for 256 bit times is abandoned (the parser hunts for the next sync byte), so a corrupted
// length field never swallows the host's retry. MEM_WRITE payloads are buffered and committed only
// after the CRC checked, so a corrupted frame never touches memory.
`include "tpu_assert.svh"

module tpu_uart_bridge #(
  parameter int unsigned MemBytes   = 131072,    // size of the memory behind the native port
  parameter int unsigned ClkHz      = 12000000,  // reported by INFO
  parameter int unsigned DefaultDiv = 104        // clock cycles per bit after reset (12 MHz / 115200)
) (
  input  logic        clk_i,
  input  logic        rst_ni,

  input  logic        rx_i,
  output logic        tx_o,
  input  logic        irq_i,

  // AXI4-Lite master (device registers)
  output logic [11:0] m_axil_awaddr_o,
  output logic        m_axil_awvalid_o,
  input  logic        m_axil_awready_i,
  output logic [31:0] m_axil_wdata_o,
  output logic [3:0]  m_axil_wstrb_o,
  output logic        m_axil_wvalid_o,
  input  logic        m_axil_wready_i,
  input  logic [1:0]  m_axil_bresp_i,
  input  logic        m_axil_bvalid_i,
  output logic        m_axil_bready_o,
  output logic [11:0] m_axil_araddr_o,
  output logic        m_axil_arvalid_o,
  input  logic        m_axil_arready_i,
  input  logic [31:0] m_axil_rdata_i,
  input  logic [1:0]  m_axil_rresp_i,
  input  logic        m_axil_rvalid_i,
  output logic        m_axil_rready_o,

  // Memory word port: req held until gnt; a read's data comes with rvalid after the grant.
  output logic        mem_req_o,
  output logic        mem_we_o,
  output logic [31:0] mem_addr_o,      // byte address, word aligned
  output logic [31:0] mem_wdata_o,
  input  logic        mem_gnt_i,
  input  logic        mem_rvalid_i,
  input  logic [31:0] mem_rdata_i,

  output logic [15:0] div_o            // current bit time in clock cycles
);

  // Commands (low 7 bits of cmd; bit 7 = RETRY: a retransmission of the previous request).
  localparam logic [6:0] CmdStatus  = 7'h00;
  localparam logic [6:0] CmdInfo    = 7'h01;
  localparam logic [6:0] CmdRegRd   = 7'h02;
  localparam logic [6:0] CmdRegWr   = 7'h03;
  localparam logic [6:0] CmdMemRd   = 7'h04;
  localparam logic [6:0] CmdMemWr   = 7'h05;
  localparam logic [6:0] CmdSetBaud = 7'h06;
  // Response codes
  localparam logic [7:0] RspOk      = 8'h00;
  localparam logic [7:0] RspBadCrc  = 8'h01;
  localparam logic [7:0] RspBadCmd  = 8'h02;
  localparam logic [7:0] RspRange   = 8'h03;
  localparam logic [7:0] RspBusErr  = 8'h04;
  localparam logic [7:0] SyncReq    = 8'hA5;
  localparam logic [7:0] SyncRsp    = 8'h5A;
  localparam logic [31:0] InfoMagic = 32'h4255_5054;  // "TPUB" little-endian
  localparam logic [7:0]  ProtoVer  = 8'd1;

  function automatic logic [7:0] crc8(input logic [7:0] crc, input logic [7:0] data);
    logic [7:0] x;
    x = crc ^ data;
    for (int i = 0; i < 8; i++) begin
      x = x[7] ? ({x[6:0], 1'b0} ^ 8'h07) : {x[6:0], 1'b0};
    end
    crc8 = x;
  endfunction

  // ---------------------------------------------------------------------------------------------
  // UART
  // ---------------------------------------------------------------------------------------------
  logic [15:0] div_q, div_d, new_div_q, new_div_d;
  logic [7:0]  rx_data;
  logic        rx_valid, rx_ferr, rx_busy;
  logic [7:0]  tx_data;
  logic        tx_valid, tx_ready, tx_busy;

  tpu_uart_rx u_rx (
    .clk_i, .rst_ni, .div_i(div_q), .rx_i,
    .data_o(rx_data), .data_valid_o(rx_valid), .frame_err_o(rx_ferr), .busy_o(rx_busy)
  );

  tpu_uart_tx u_tx (
    .clk_i, .rst_ni, .div_i(div_q), .data_i(tx_data), .data_valid_i(tx_valid),
    .data_ready_o(tx_ready), .tx_o, .busy_o(tx_busy)
  );

  assign div_o = div_q;

  // ---------------------------------------------------------------------------------------------
  // MEM_WRITE payload buffer (256 words: 2 iCE40 BRAMs), written while parsing, read on commit.
  // ---------------------------------------------------------------------------------------------
  logic [31:0] wbuf [256];
  logic        wbuf_we, wbuf_re;
  logic [7:0]  wbuf_waddr, wbuf_raddr;
  logic [31:0] wbuf_wdata, wbuf_rdata_q;

  always_ff @(posedge clk_i) begin
    if (wbuf_we) wbuf[wbuf_waddr] <= wbuf_wdata;
  end
  always_ff @(posedge clk_i) begin
    if (wbuf_re) wbuf_rdata_q <= wbuf[wbuf_raddr];
  end

  // ---------------------------------------------------------------------------------------------
  // Protocol FSM
  // ---------------------------------------------------------------------------------------------
  typedef enum logic [3:0] {
    StHunt, StHdr, StPay, StCrc, StExec, StRegRd, StRegWr, StCommitRd, StCommitWr,
    StRspHead, StRspFetch, StRspWait, StRspWord, StRspCrc, StRspDone
  } state_e;

  typedef enum logic [1:0] {SrcNone, SrcWord, SrcInfo, SrcMem} src_e;

  state_e      state_q, state_d;
  logic [7:0]  cmd_q, cmd_d, seq_q, seq_d, n_q, n_d;
  logic [31:0] addr_q, addr_d;
  logic [2:0]  hidx_q, hidx_d;         // header byte index (cmd, seq, addr x4, n)
  logic [9:0]  pidx_q, pidx_d;         // payload byte index
  logic [10:0] plen_q, plen_d;         // payload bytes expected
  logic [31:0] sh_q, sh_d;             // payload word being assembled / word being sent
  logic [7:0]  crc_q, crc_d;
  logic [23:0] idle_q, idle_d;         // cycles since the last byte of an unfinished request
  logic [7:0]  code_q, code_d;
  logic [7:0]  last_seq_q, last_seq_d;
  logic        last_ok_q, last_ok_d;   // last_seq_q names an executed write
  logic        dup_q, dup_d;           // this request is a retry of an executed write
  logic        overrun_q, overrun_d, ferr_q, ferr_d;
  logic        set_div_q, set_div_d;
  src_e        src_q, src_d;
  logic [8:0]  widx_q, widx_d;         // payload word index
  logic [8:0]  nwords_q, nwords_d;     // payload words of the response
  logic [1:0]  bidx_q, bidx_d;         // byte index in the word being sent
  logic [1:0]  ridx_q, ridx_d;         // response header byte index (after the sync byte)
  logic        aw_q, aw_d, w_q, w_d, ar_q, ar_d;   // AXI-Lite requests outstanding

  logic [6:0]  op;
  logic        retry;
  logic [32:0] mem_end;                // addr + 4 * words, 33 bits
  logic        mem_range_ok;
  logic [7:0]  status;
  logic        parsing;

  assign op    = cmd_q[6:0];
  assign retry = cmd_q[7];
  assign mem_end = {1'b0, addr_q} + {22'd0, ({1'b0, n_q} + 9'd1), 2'b00};
  assign mem_range_ok = (addr_q[1:0] == 2'b00) && (mem_end <= 33'(MemBytes));
  assign status = {4'd0, dup_q, ferr_q, overrun_q, irq_i};
  assign parsing = (state_q == StHunt) || (state_q == StHdr) || (state_q == StPay) ||
                   (state_q == StCrc);

  // Payload bytes a request carries.
  function automatic logic [10:0] req_payload(input logic [6:0] o, input logic [7:0] n);
    if (o == CmdRegWr)      req_payload = 11'd4;
    else if (o == CmdMemWr) req_payload = {({1'b0, n} + 9'd1), 2'b00};
    else                    req_payload = 11'd0;
  endfunction

  // The memory request depends on the state only, never on the grant it waits for: kept out of
  // the next-state block so no combinational path runs request -> grant -> request (the memory's
  // arbiter answers p_gnt from p_req in the same cycle).
  assign mem_req_o = (state_q == StCommitWr) || (state_q == StRspFetch && src_q == SrcMem);
  assign mem_we_o  = (state_q == StCommitWr);

  always_comb begin
    state_d    = state_q;
    cmd_d      = cmd_q;
    seq_d      = seq_q;
    n_d        = n_q;
    addr_d     = addr_q;
    hidx_d     = hidx_q;
    pidx_d     = pidx_q;
    plen_d     = plen_q;
    sh_d       = sh_q;
    crc_d      = crc_q;
    idle_d     = idle_q;
    code_d     = code_q;
    last_seq_d = last_seq_q;
    last_ok_d  = last_ok_q;
    dup_d      = dup_q;
    overrun_d  = overrun_q || (rx_valid && !parsing);
    ferr_d     = ferr_q || rx_ferr;
    set_div_d  = set_div_q;
    div_d      = div_q;
    new_div_d  = new_div_q;
    src_d      = src_q;
    widx_d     = widx_q;
    nwords_d   = nwords_q;
    bidx_d     = bidx_q;
    ridx_d     = ridx_q;
    aw_d       = aw_q;
    w_d        = w_q;
    ar_d       = ar_q;

    tx_valid   = 1'b0;
    tx_data    = SyncRsp;
    wbuf_we    = 1'b0;
    wbuf_waddr = pidx_q[9:2];
    wbuf_wdata = {rx_data, sh_q[31:8]};
    wbuf_re    = 1'b0;
    wbuf_raddr = widx_q[7:0];
    mem_addr_o = addr_q + {21'd0, widx_q, 2'b00};
    mem_wdata_o = wbuf_rdata_q;

    // An unfinished request that stalls for 256 bit times is dropped.
    if (state_q == StHdr || state_q == StPay || state_q == StCrc) begin
      if (rx_valid || rx_busy) begin
        idle_d = '0;
      end else begin
        idle_d = idle_q + 24'd1;
        if (idle_q >= {div_q, 8'd0}) state_d = StHunt;
      end
    end

    unique case (state_q)
      StHunt: begin
        if (rx_valid && rx_data == SyncReq) begin
          state_d = StHdr;
          hidx_d  = '0;
          crc_d   = '0;
          idle_d  = '0;
        end
      end
      StHdr: if (rx_valid) begin
        crc_d = crc8(crc_q, rx_data);
        unique case (hidx_q)
          3'd0:    cmd_d = rx_data;
          3'd1:    seq_d = rx_data;
          3'd2:    addr_d[7:0] = rx_data;
          3'd3:    addr_d[15:8] = rx_data;
          3'd4:    addr_d[23:16] = rx_data;
          3'd5:    addr_d[31:24] = rx_data;
          default: n_d = rx_data;
        endcase
        hidx_d = hidx_q + 3'd1;
        if (hidx_q == 3'd6) begin
          plen_d  = req_payload(cmd_q[6:0], rx_data);
          pidx_d  = '0;
          state_d = (req_payload(cmd_q[6:0], rx_data) == 11'd0) ? StCrc : StPay;
        end
      end
      StPay: if (rx_valid) begin
        crc_d  = crc8(crc_q, rx_data);
        sh_d   = {rx_data, sh_q[31:8]};
        pidx_d = pidx_q + 10'd1;
        if (pidx_q[1:0] == 2'd3 && op == CmdMemWr) wbuf_we = 1'b1;
        if ({1'b0, pidx_q} == plen_q - 11'd1) state_d = StCrc;
      end
      StCrc: if (rx_valid) begin
        crc_d   = '0;
        state_d = StExec;
        code_d  = (crc8(crc_q, rx_data) == 8'd0) ? RspOk : RspBadCrc;
      end
      StExec: begin
        // Decide what to do; every path ends in a response.
        dup_d    = 1'b0;
        src_d    = SrcNone;
        nwords_d = '0;
        widx_d   = '0;
        state_d  = StRspHead;
        ridx_d   = '0;
        if (code_q == RspOk) begin
          unique case (op)
            CmdStatus: ;
            CmdInfo: begin
              src_d    = SrcInfo;
              nwords_d = 9'd4;
            end
            CmdRegRd: begin
              ar_d    = 1'b1;
              state_d = StRegRd;
            end
            CmdRegWr: begin
              if (retry && last_ok_q && last_seq_q == seq_q) begin
                dup_d = 1'b1;
              end else begin
                aw_d    = 1'b1;
                w_d     = 1'b1;
                state_d = StRegWr;
              end
            end
            CmdMemRd: begin
              if (!mem_range_ok) begin
                code_d = RspRange;
              end else begin
                src_d    = SrcMem;
                nwords_d = {1'b0, n_q} + 9'd1;
              end
            end
            CmdMemWr: begin
              if (!mem_range_ok) begin
                code_d = RspRange;
              end else if (retry && last_ok_q && last_seq_q == seq_q) begin
                dup_d = 1'b1;
              end else begin
                state_d = StCommitRd;
              end
            end
            CmdSetBaud: begin
              if (addr_q[31:16] != 16'd0 || addr_q[15:0] < 16'd4) begin
                code_d = RspRange;
              end else begin
                set_div_d = 1'b1;
                new_div_d = addr_q[15:0];
              end
            end
            default: code_d = RspBadCmd;
          endcase
        end
      end
      StRegRd: begin
        if (m_axil_arready_i) ar_d = 1'b0;
        if (!ar_q && m_axil_rvalid_i) begin
          sh_d     = m_axil_rdata_i;
          state_d  = StRspHead;
          if (m_axil_rresp_i != 2'b00) begin
            code_d = RspBusErr;
          end else begin
            src_d    = SrcWord;
            nwords_d = 9'd1;
          end
        end
      end
      StRegWr: begin
        if (m_axil_awready_i) aw_d = 1'b0;
        if (m_axil_wready_i) w_d = 1'b0;
        if (!aw_q && !w_q && m_axil_bvalid_i) begin
          state_d    = StRspHead;
          code_d     = (m_axil_bresp_i != 2'b00) ? RspBusErr : RspOk;
          last_seq_d = seq_q;
          last_ok_d  = 1'b1;
        end
      end
      StCommitRd: begin
        wbuf_re = 1'b1;
        state_d = StCommitWr;
      end
      StCommitWr: begin
        if (mem_gnt_i) begin
          widx_d = widx_q + 9'd1;
          if (widx_q[7:0] == n_q) begin
            widx_d     = '0;
            state_d    = StRspHead;
            last_seq_d = seq_q;
            last_ok_d  = 1'b1;
          end else begin
            state_d = StCommitRd;
          end
        end
      end
      StRspHead: begin
        tx_valid = 1'b1;
        unique case (ridx_q)
          2'd0:    tx_data = SyncRsp;
          2'd1:    tx_data = code_q;
          2'd2:    tx_data = seq_q;
          default: tx_data = status;
        endcase
        if (tx_ready) begin
          if (ridx_q != 2'd0) crc_d = crc8(crc_q, tx_data);
          ridx_d = ridx_q + 2'd1;
          if (ridx_q == 2'd3) begin
            overrun_d = rx_valid && !parsing;   // reported now: clear
            ferr_d    = rx_ferr;
            state_d   = (nwords_q == 9'd0) ? StRspCrc : StRspFetch;
          end
        end
      end
      StRspFetch: begin
        bidx_d = '0;
        unique case (src_q)
          SrcMem: begin
            if (mem_gnt_i) state_d = StRspWait;
          end
          SrcInfo: begin
            unique case (widx_q[1:0])
              2'd0:    sh_d = InfoMagic;
              2'd1:    sh_d = MemBytes;
              2'd2:    sh_d = ClkHz;
              default: sh_d = {ProtoVer, 8'd0, div_q};
            endcase
            state_d = StRspWord;
          end
          default: state_d = StRspWord;           // SrcWord: sh_q holds it
        endcase
      end
      StRspWait: begin
        if (mem_rvalid_i) begin
          sh_d    = mem_rdata_i;
          state_d = StRspWord;
        end
      end
      StRspWord: begin
        tx_valid = 1'b1;
        tx_data  = sh_q[7:0];
        if (tx_ready) begin
          crc_d  = crc8(crc_q, tx_data);
          sh_d   = {8'd0, sh_q[31:8]};
          bidx_d = bidx_q + 2'd1;
          if (bidx_q == 2'd3) begin
            widx_d  = widx_q + 9'd1;
            state_d = (widx_q + 9'd1 == nwords_q) ? StRspCrc : StRspFetch;
          end
        end
      end
      StRspCrc: begin
        tx_valid = 1'b1;
        tx_data  = crc_q;
        if (tx_ready) state_d = StRspDone;
      end
      StRspDone: begin
        // Switch the baud rate only after the last stop bit has left.
        if (tx_ready) begin
          if (set_div_q) div_d = new_div_q;
          set_div_d = 1'b0;
          crc_d     = '0;
          state_d   = StHunt;
        end
      end
      default: state_d = StHunt;
    endcase
  end

  always_ff @(posedge clk_i) begin
    if (!rst_ni) begin
      state_q    <= StHunt;
      cmd_q      <= '0;
      seq_q      <= '0;
      n_q        <= '0;
      addr_q     <= '0;
      hidx_q     <= '0;
      pidx_q     <= '0;
      plen_q     <= '0;
      sh_q       <= '0;
      crc_q      <= '0;
      idle_q     <= '0;
      code_q     <= '0;
      last_seq_q <= '0;
      last_ok_q  <= 1'b0;
      dup_q      <= 1'b0;
      overrun_q  <= 1'b0;
      ferr_q     <= 1'b0;
      set_div_q  <= 1'b0;
      div_q      <= 16'(DefaultDiv);
      new_div_q  <= '0;
      src_q      <= SrcNone;
      widx_q     <= '0;
      nwords_q   <= '0;
      bidx_q     <= '0;
      ridx_q     <= '0;
      aw_q       <= 1'b0;
      w_q        <= 1'b0;
      ar_q       <= 1'b0;
    end else begin
      state_q    <= state_d;
      cmd_q      <= cmd_d;
      seq_q      <= seq_d;
      n_q        <= n_d;
      addr_q     <= addr_d;
      hidx_q     <= hidx_d;
      pidx_q     <= pidx_d;
      plen_q     <= plen_d;
      sh_q       <= sh_d;
      crc_q      <= crc_d;
      idle_q     <= idle_d;
      code_q     <= code_d;
      last_seq_q <= last_seq_d;
      last_ok_q  <= last_ok_d;
      dup_q      <= dup_d;
      overrun_q  <= overrun_d;
      ferr_q     <= ferr_d;
      set_div_q  <= set_div_d;
      div_q      <= div_d;
      new_div_q  <= new_div_d;
      src_q      <= src_d;
      widx_q     <= widx_d;
      nwords_q   <= nwords_d;
      bidx_q     <= bidx_d;
      ridx_q     <= ridx_d;
      aw_q       <= aw_d;
      w_q        <= w_d;
      ar_q       <= ar_d;
    end
  end

  // AXI4-Lite master: valid held until ready (flops), full-word writes.
  assign m_axil_awaddr_o  = addr_q[11:0];
  assign m_axil_awvalid_o = aw_q;
  assign m_axil_wdata_o   = sh_q;
  assign m_axil_wstrb_o   = 4'hF;
  assign m_axil_wvalid_o  = w_q;
  assign m_axil_bready_o  = (state_q == StRegWr) && !aw_q && !w_q;
  assign m_axil_araddr_o  = addr_q[11:0];
  assign m_axil_arvalid_o = ar_q;
  assign m_axil_rready_o  = (state_q == StRegRd) && !ar_q;

  logic unused_bridge;
  assign unused_bridge = ^{tx_busy, addr_q[31:12]};

  `TPU_ASSERT(AxilOneOp_A, !((aw_q || w_q) && ar_q), clk_i, !rst_ni)

endmodule
