// Wrapper for the netlist-vs-RTL check: the RTL tpu_mxu and Yosys' synthesized netlist of it
// (module tpu_mxu_gate, ArrayN=4, TagW=4) side by side on the same inputs.
module mxu_equiv_tb (
  input  logic         clk_i,
  input  logic         rst_ni,
  input  logic         act_valid_i,
  input  logic         act_swap_i,
  input  logic         act_bf16_i,
  input  logic [63:0]  act_data_i,
  input  logic [3:0]   act_tag_i,
  input  logic         wt_valid_i,
  input  logic         wt_transpose_i,
  input  logic [63:0]  wt_data_i,
  output logic         rtl_valid_o,
  output logic [127:0] rtl_data_o,
  output logic [3:0]   rtl_tag_o,
  output logic         rtl_busy_o,
  output logic         gate_valid_o,
  output logic [127:0] gate_data_o,
  output logic [3:0]   gate_tag_o,
  output logic         gate_busy_o
);
  tpu_mxu #(.ArrayN(4), .TagW(4), .EnableBf16(1'b0)) u_rtl (
    .clk_i, .rst_ni, .act_valid_i, .act_swap_i, .act_bf16_i, .act_data_i, .act_tag_i, .wt_valid_i,
    .wt_transpose_i, .wt_data_i,
    .out_valid_o(rtl_valid_o), .out_data_o(rtl_data_o), .out_tag_o(rtl_tag_o), .busy_o(rtl_busy_o)
  );
  tpu_mxu_gate u_gate (
    .clk_i, .rst_ni, .act_valid_i, .act_swap_i, .act_bf16_i, .act_data_i, .act_tag_i, .wt_valid_i,
    .wt_transpose_i, .wt_data_i,
    .out_valid_o(gate_valid_o), .out_data_o(gate_data_o), .out_tag_o(gate_tag_o), .busy_o(gate_busy_o)
  );
endmodule
