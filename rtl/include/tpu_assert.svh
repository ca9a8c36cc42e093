// Assertion macros in the style of lowRISC's prim_assert.sv.
// Live under Verilator (build with --assert); empty under SYNTHESIS (Yosys 0.23 rejects
// concurrent assertions).
//
//   `TPU_ASSERT(Name_A, prop, clk, rst)        prop holds on every clock edge outside reset
//   `TPU_ASSERT_NEVER(Name_A, prop, clk, rst)  prop never holds
//   `TPU_ASSERT_KNOWN(Name_A, sig, clk, rst)   sig has no X/Z outside reset
//   `TPU_ASSERT_INIT(Name_A, prop)             prop holds at time zero (parameter checks; also
//                                              enforced in synthesis, see below)
// `rst` is the active-high "in reset" expression, e.g. !rst_ni.
`ifndef TPU_ASSERT_SVH
`define TPU_ASSERT_SVH

`ifndef SYNTHESIS

`define TPU_ASSERT(__name, __prop, __clk, __rst) \
  __name: assert property (@(posedge __clk) disable iff (__rst) (__prop)) \
    else $error("[%m] assertion %s failed", `"__name`");

`define TPU_ASSERT_NEVER(__name, __prop, __clk, __rst) \
  __name: assert property (@(posedge __clk) disable iff (__rst) !(__prop)) \
    else $error("[%m] assertion %s failed", `"__name`");

`define TPU_ASSERT_KNOWN(__name, __sig, __clk, __rst) \
  `TPU_ASSERT(__name, !$isunknown(__sig), __clk, __rst)

`define TPU_ASSERT_INIT(__name, __prop) \
  initial begin : __name \
    if (!(__prop)) $fatal(1, "[%m] init assertion %s failed", `"__name`"); \
  end

`else  // SYNTHESIS

`define TPU_ASSERT(__name, __prop, __clk, __rst)
`define TPU_ASSERT_NEVER(__name, __prop, __clk, __rst)
`define TPU_ASSERT_KNOWN(__name, __sig, __clk, __rst)
// Parameter checks still bite in synthesis: a failing one instantiates a module that does not
// exist, so elaboration stops with "module tpu_init_assertion_failed not found" in __name
// (Yosys 0.23 has no elaboration-time $error). A bad board parameter cannot become a bitstream.
`define TPU_ASSERT_INIT(__name, __prop) \
  if (!(__prop)) begin : __name \
    tpu_init_assertion_failed u_failed (); \
  end

`endif  // SYNTHESIS

`endif  // TPU_ASSERT_SVH
