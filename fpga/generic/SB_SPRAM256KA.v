// Synthesizable stand-in for the iCE40 UP5K's SB_SPRAM256KA (16K x 16 single-port RAM with a
// nibble write mask), used ONLY by the ECP5 and Xilinx flows (scripts/fpga/ecp5.sh ulx3s,
// scripts/fpga/xilinx.sh arty). rtl/fpga/tpu_axi_sram.sv instantiates SB_SPRAM256KA under
// SYNTHESIS; on the other families this model lets Yosys map the same host memory to block RAM
// (DP16KD / RAMB36E1). Behaviour as in Lattice's iCE40 technology library for the pins the board
// memory uses: one access per clock while CHIPSELECT, write when WREN (MASKWREN[i] enables bits
// 4i+3..4i), otherwise a read whose data appears on DATAOUT after the clock edge and holds.
// STANDBY/SLEEP/POWEROFF(active low) are honoured as "no access". The name is the vendor's
// (it must match the instance in tpu_axi_sram.sv), hence no tpu_ prefix.
module SB_SPRAM256KA (
  input  wire [13:0] ADDRESS,
  input  wire [15:0] DATAIN,
  input  wire [3:0]  MASKWREN,
  input  wire        WREN,
  input  wire        CHIPSELECT,
  input  wire        CLOCK,
  input  wire        STANDBY,
  input  wire        SLEEP,
  input  wire        POWEROFF,
  output reg  [15:0] DATAOUT
);
  reg [15:0] mem [0:16383];
  wire       access = CHIPSELECT && !STANDBY && !SLEEP && POWEROFF;

  always @(posedge CLOCK) begin
    if (access && WREN) begin
      if (MASKWREN[0]) mem[ADDRESS][3:0]   <= DATAIN[3:0];
      if (MASKWREN[1]) mem[ADDRESS][7:4]   <= DATAIN[7:4];
      if (MASKWREN[2]) mem[ADDRESS][11:8]  <= DATAIN[11:8];
      if (MASKWREN[3]) mem[ADDRESS][15:12] <= DATAIN[15:12];
    end
  end

  always @(posedge CLOCK) begin
    if (access && !WREN) DATAOUT <= mem[ADDRESS];
  end
endmodule
