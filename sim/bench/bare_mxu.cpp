#include "bare_mxu.h"

#include <chrono>
#include <memory>
#include <random>
#include <vector>

#include "Vtpu_mxu_n16.h"
#include "verilated.h"

namespace tpuw::bench {
namespace {

constexpr unsigned kN = 16;
constexpr unsigned kWords = kN * 16 / 32;  // one row of 16-bit elements in 32-bit words
constexpr unsigned kPatternRows = 1024;

}  // namespace

BareMxuRate run_bare_mxu(uint64_t cycles, bool bf16) {
  // Verilator keeps a thread-local "current context" (scope registration and teardown use it); point
  // it at ours for the model's whole life and clear it afterwards, as SimDevice does, so this model
  // can share a thread with device models.
  auto ctx = std::make_unique<VerilatedContext>();
  Verilated::threadContextp(ctx.get());
  auto m = std::make_unique<Vtpu_mxu_n16>(ctx.get(), "mxu");
  std::mt19937 rng(1);
  std::vector<uint32_t> pattern(kPatternRows * kWords);
  for (auto& w : pattern) w = static_cast<uint32_t>(rng());

  auto tick = [&] {
    m->clk_i = 0;
    m->eval();
    m->clk_i = 1;
    m->eval();
  };

  m->rst_ni = 0;
  m->act_valid_i = 0;
  m->act_swap_i = 0;
  m->wt_valid_i = 0;
  for (int i = 0; i < 4; ++i) tick();
  m->rst_ni = 1;
  // Shift a random tile into the shadow registers.
  m->wt_valid_i = 1;
  for (unsigned r = 0; r < kN; ++r) {
    for (unsigned w = 0; w < kWords; ++w) m->wt_data_i[w] = static_cast<uint32_t>(rng());
    tick();
  }
  m->wt_valid_i = 0;

  // Stream: one row per cycle, the first one swaps the tile in.
  m->act_valid_i = 1;
  m->act_swap_i = 1;
  m->act_bf16_i = bf16 ? 1 : 0;
  uint32_t sink = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (uint64_t c = 0; c < cycles; ++c) {
    const uint32_t* row = &pattern[(c % kPatternRows) * kWords];
    for (unsigned w = 0; w < kWords; ++w) m->act_data_i[w] = row[w];
    m->act_tag_i = static_cast<uint16_t>(c);
    tick();
    m->act_swap_i = 0;
    sink ^= m->out_data_o[0];
  }
  const auto t1 = std::chrono::steady_clock::now();
  m->final();
  m.reset();
  ctx.reset();
  Verilated::threadContextp(nullptr);
  volatile uint32_t keep = sink;  // the outputs are consumed
  (void)keep;

  BareMxuRate r{};
  r.cycles = cycles;
  r.seconds = std::chrono::duration<double>(t1 - t0).count();
  r.cycles_per_s = r.seconds > 0 ? static_cast<double>(cycles) / r.seconds : 0.0;
  r.pe_cycles_per_s = r.cycles_per_s * kN * kN;
  return r;
}

}  // namespace tpuw::bench
