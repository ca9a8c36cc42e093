// Private: SimDevice::Impl for one verilated tpu_top configuration (class Top = Vtpu_top_n<N>).
// Included only by the generated sim_models.cpp, next to the model headers.
//
// One clock cycle (step):
//   drive the slave/master outputs computed at the last edge onto the model's inputs,
//   clk_i = 0, eval            -> the device's outputs for this cycle settle
//   sample them; AxiSlave::posedge and AxilMaster::posedge see this cycle's handshakes
//   clk_i = 1, eval            -> the device's flops see the same handshakes
// so both sides agree on every handshake and the slave's outputs never depend combinationally on
// the device's. The hot loop is a template: no virtual call, no allocation, no std::function.
#pragma once

#include <verilated.h>
#if TPUW_SIM_TRACE_FST
#include <verilated_fst_c.h>
#endif

#include <fmt/format.h>
#include <sys/stat.h>

#include <cstring>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>

#include "sim_device_impl.h"
#include "tpuw/sim/error.h"

namespace tpuw::sim::detail {

template <std::size_t W>
inline const uint8_t* bytes_of(const VlWide<W>& v) noexcept {
  return reinterpret_cast<const uint8_t*>(v.data());
}
template <class T, std::enable_if_t<std::is_integral_v<T>, int> = 0>
inline const uint8_t* bytes_of(const T& v) noexcept {
  return reinterpret_cast<const uint8_t*>(&v);
}
template <std::size_t W>
inline void set_bytes(VlWide<W>& v, const uint8_t* src) noexcept {
  std::memcpy(v.data(), src, W * sizeof(EData));
}
template <class T, std::enable_if_t<std::is_integral_v<T>, int> = 0>
inline void set_bytes(T& v, const uint8_t* src) noexcept {
  std::memcpy(&v, src, sizeof(T));
}

// Assign to a port of the port's own width (the caller keeps values in range).
template <class T, class V>
inline T narrow(const T&, V v) noexcept {
  return static_cast<T>(v);
}

template <class Top>
class ModelImpl final : public SimDevice::Impl {
 public:
  ModelImpl(const SimDeviceConfig& config, const DeviceParams& params)
      : Impl(config, params), ctx_(std::make_unique<VerilatedContext>()) {
    static_assert(sizeof(Top::m_axi_rdata_i) <= kAxiMaxBusBytes);
    if (sizeof(Top::m_axi_rdata_i) * 8 != params.dma_data_w) {
      throw SimError(SimErrorKind::kInvalidArgument,
                     fmt::format("SimDevice: model m_axi_rdata is {} bits, configuration says {}",
                                 sizeof(Top::m_axi_rdata_i) * 8, params.dma_data_w));
    }
    // An RTL assertion must not abort the process: it is reported as SimError(kAssertion).
    ctx_->fatalOnError(false);
    enter();
    construct_top();
    if (!config.wave.path.empty()) set_wave(config.wave.path, config.wave.from, config.wave.to);
    Top& t = *top_;
    t.clk_i = 0;
    t.rst_ni = 0;
    drive();
    t.eval();
    for (unsigned i = 0; i < config.reset_cycles; ++i) step<false>();
    t.rst_ni = 1;
    check_model_errors();
  }

  // Verilator 5.006's generated model constructor is not exception-safe: when operator new fails
  // half way, unwinding the partly built symbol table crashes in VerilatedContextImp::scopeErase
  // (seen under `ulimit -v` with many devices). So the model is only constructed after a probe
  // allocation of kConstructProbeBytes (far more than any model needs) succeeded, and models are
  // constructed one at a time, so no other construction eats the probed memory in between. This
  // narrows the window to allocations by unrelated threads; it cannot close it.
  static constexpr size_t kConstructProbeBytes = size_t{64} << 20;
  void construct_top() {
    static std::mutex construct_mu;  // serializes a third-party constructor, holds no state
    std::lock_guard lk(construct_mu);
    void* probe = std::malloc(kConstructProbeBytes);
    if (probe == nullptr) {
      throw SimError(SimErrorKind::kOutOfMemory,
                     fmt::format("out of memory: cannot construct the device model (needs up to {} MiB)",
                                 kConstructProbeBytes >> 20));
    }
    std::free(probe);
    top_ = std::make_unique<Top>(ctx_.get(), "TOP");
  }

  ~ModelImpl() override {
    enter();
    close_wave();
    top_->final();
    top_.reset();
    ctx_.reset();
    // Do not leave Verilator's thread-local context pointing at a deleted context.
    Verilated::threadContextp(nullptr);
  }

  void tick(uint64_t n) override {
    if (hang_) [[unlikely]] {
      cycle_ += n;
      return;
    }
    enter();
    for (uint64_t i = 0; i < n; ++i) step<true>();
  }

  uint64_t run(uint64_t max_cycles) override {
    if (hang_) [[unlikely]] {
      cycle_ += max_cycles;
      return max_cycles;
    }
    enter();
    const Top& t = *top_;
    for (uint64_t i = 0; i < max_cycles; ++i) {
      if (t.irq_o) return i;
      step<true>();
    }
    return max_cycles;
  }

  bool run_axil(uint64_t timeout) override {
    if (hang_) [[unlikely]] {
      cycle_ += timeout;
      return false;
    }
    enter();
    for (uint64_t i = 0; i < timeout; ++i) {
      step<true>();
      if (!axil_.busy()) return true;
    }
    return false;
  }

  bool irq() const noexcept override { return top_->irq_o != 0; }

  void hw_reset(unsigned cycles) override {
    enter();
    slave_.reset();
    axil_.abort();
    Top& t = *top_;
    t.rst_ni = 0;
    drive();
    for (unsigned i = 0; i < cycles; ++i) step<false>();
    t.rst_ni = 1;
    check_model_errors();
  }

  void check_model_errors() override {
    if (ctx_->gotError()) {
      ctx_->gotError(false);
      ctx_->gotFinish(false);
      throw SimError(SimErrorKind::kAssertion,
                     fmt::format("device model (ArrayN={}) reported an assertion failure or $stop by "
                                 "cycle {} (Verilator's message is on stderr)",
                                 params_.array_n, cycle_));
    }
  }

  void set_wave(const std::string& path, uint64_t from, uint64_t to) override {
#if TPUW_SIM_TRACE_FST
    close_wave();
    wave_path_ = path;
    wave_from_ = from;
    wave_to_ = to;
    wave_pending_ = !path.empty() && to >= from;
    wave_check_ = wave_pending_;
    if (wave_pending_ && cycle_ >= from) open_wave();
#else
    (void)from;
    (void)to;
    if (!path.empty()) {
      throw SimError(SimErrorKind::kInvalidArgument, "SimDevice: built without FST tracing");
    }
#endif
  }

  void stop_wave() override {
    close_wave();
    wave_pending_ = false;
    wave_check_ = false;
  }

  bool wave_active() const noexcept override {
#if TPUW_SIM_TRACE_FST
    return fst_ != nullptr;
#else
    return false;
#endif
  }

 private:
  // Verilator's runtime finds "the" context through a thread-local pointer (scope registration,
  // $stop/assertion reporting, destruction). With several devices per thread it must point at
  // ours whenever our model runs; set it on entry to every operation (not per cycle).
  void enter() const noexcept { Verilated::threadContextp(ctx_.get()); }

  // Slave and master outputs -> model inputs.
  void drive() noexcept {
    Top& t = *top_;
    const AxiSlaveSignals& s = slave_.out();
    t.m_axi_awready_i = s.awready;
    t.m_axi_wready_i = s.wready;
    t.m_axi_bvalid_i = s.bvalid;
    t.m_axi_bid_i = narrow(t.m_axi_bid_i, s.bid);
    t.m_axi_bresp_i = s.bresp;
    t.m_axi_arready_i = s.arready;
    t.m_axi_rvalid_i = s.rvalid;
    if (s.rvalid) {
      t.m_axi_rid_i = narrow(t.m_axi_rid_i, s.rid);
      t.m_axi_rresp_i = s.rresp;
      t.m_axi_rlast_i = s.rlast;
      set_bytes(t.m_axi_rdata_i, s.rdata.data());
    }
    const AxilMasterSignals& m = axil_.out();
    t.s_axil_awvalid_i = m.awvalid;
    t.s_axil_awaddr_i = narrow(t.s_axil_awaddr_i, m.awaddr);
    t.s_axil_wvalid_i = m.wvalid;
    t.s_axil_wdata_i = m.wdata;
    t.s_axil_wstrb_i = m.wstrb;
    t.s_axil_bready_i = m.bready;
    t.s_axil_arvalid_i = m.arvalid;
    t.s_axil_araddr_i = narrow(t.s_axil_araddr_i, m.araddr);
    t.s_axil_rready_i = m.rready;
  }

  // Model outputs (clock low, settled) -> slave and master edges.
  void sample() noexcept {
    const Top& t = *top_;
    AxiMasterSignals in;
    in.awvalid = t.m_axi_awvalid_o;
    in.wvalid = t.m_axi_wvalid_o;
    in.bready = t.m_axi_bready_o;
    in.arvalid = t.m_axi_arvalid_o;
    in.rready = t.m_axi_rready_o;
    if (in.awvalid) {
      in.awid = t.m_axi_awid_o;
      in.awaddr = t.m_axi_awaddr_o;
      in.awlen = t.m_axi_awlen_o;
      in.awsize = t.m_axi_awsize_o;
      in.awburst = t.m_axi_awburst_o;
    }
    if (in.wvalid) {
      in.wdata = bytes_of(t.m_axi_wdata_o);
      in.wstrb = t.m_axi_wstrb_o;
      in.wlast = t.m_axi_wlast_o;
    }
    if (in.arvalid) {
      in.arid = t.m_axi_arid_o;
      in.araddr = t.m_axi_araddr_o;
      in.arlen = t.m_axi_arlen_o;
      in.arsize = t.m_axi_arsize_o;
      in.arburst = t.m_axi_arburst_o;
    }
    slave_.posedge(in);
    if (axil_.busy()) {
      AxilSlaveSignals a;
      a.awready = t.s_axil_awready_o;
      a.wready = t.s_axil_wready_o;
      a.bvalid = t.s_axil_bvalid_o;
      a.bresp = t.s_axil_bresp_o;
      a.arready = t.s_axil_arready_o;
      a.rvalid = t.s_axil_rvalid_o;
      a.rdata = t.s_axil_rdata_o;
      a.rresp = t.s_axil_rresp_o;
      axil_.posedge(a);
    }
  }

  // kLive = false during reset: the host side stays idle.
  template <bool kLive>
  void step() {
    Top& t = *top_;
    if constexpr (kLive) drive();
    t.clk_i = 0;
    t.eval();
#if TPUW_SIM_TRACE_FST
    if (fst_) fst_->dump(2 * cycle_);
#endif
    if constexpr (kLive) sample();
    t.clk_i = 1;
    t.eval();
#if TPUW_SIM_TRACE_FST
    if (fst_) fst_->dump(2 * cycle_ + 1);
#endif
    ++cycle_;
    if (wave_check_) [[unlikely]] update_wave();
  }

  void update_wave() {
#if TPUW_SIM_TRACE_FST
    if (fst_ && cycle_ > wave_to_) {
      close_wave();
      wave_check_ = false;
    } else if (wave_pending_ && cycle_ >= wave_from_) {
      open_wave();
    }
#endif
  }

  void open_wave() {
#if TPUW_SIM_TRACE_FST
    wave_pending_ = false;
    // Verilator's FST writer unlinks the name it is given (and NAME.hier) before creating it: given
    // /dev/full, a FIFO or a symbolic link it would replace that object with a regular file. Only a
    // regular file or nothing is accepted here; tpuw itself writes into a private directory and
    // renames the finished file (tpuw/file_io.h StagedOutput).
    for (const std::string& p : {wave_path_, wave_path_ + ".hier"}) {
      struct stat st {};
      if (::lstat(p.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
        wave_check_ = false;
        throw SimError(SimErrorKind::kInvalidArgument,
                       fmt::format("SimDevice: waveform file '{}' exists and is not a regular file (a directory, "
                                   "device, FIFO, socket or symbolic link); refusing to replace it",
                                   p));
      }
    }
    enter();
    ctx_->traceEverOn(true);
    auto fst = std::make_unique<VerilatedFstC>();
    top_->trace(fst.get(), 99);
    fst->open(wave_path_.c_str());
    if (!fst->isOpen()) {
      wave_check_ = false;
      throw SimError(SimErrorKind::kIo, fmt::format("SimDevice: cannot open waveform file '{}'", wave_path_));
    }
    fst_ = std::move(fst);
    wave_check_ = true;
#endif
  }

  void close_wave() noexcept {
#if TPUW_SIM_TRACE_FST
    if (fst_) {
      fst_->close();
      fst_.reset();
    }
#endif
  }

  std::unique_ptr<VerilatedContext> ctx_;
  std::unique_ptr<Top> top_;
#if TPUW_SIM_TRACE_FST
  std::unique_ptr<VerilatedFstC> fst_;
#endif
  std::string wave_path_;
  uint64_t wave_from_ = 0, wave_to_ = 0;
  bool wave_pending_ = false;
  bool wave_check_ = false;  // a window is pending or open: look at it after each cycle
};

}  // namespace tpuw::sim::detail
