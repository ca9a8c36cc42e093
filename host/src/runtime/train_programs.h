// Internal to the runtime: the pieces of the CNN backward programs (conv_train_bf16.cpp,
// max_pool_train_bf16.cpp) split into layout, compile and run, and TrainProgramCache, which keeps
// every program of a CNN training step compiled, with its host buffers, across steps
// (runtime/cnn_trainer.h; docs/training.md "Training CNNs").
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <utility>
#include <vector>

#include "tpuw/device.h"
#include "tpuw/runtime/conv_bf16.h"
#include "tpuw/runtime/conv_train_bf16.h"
#include "tpuw/runtime/gemm_bf16.h"

namespace tpuw::runtime::detail {

/// The dW/db GEMM of a conv layer: [C*KH*KW + 1, B*Ho*Wo]^T-shaped A (transposed on the device).
Bf16GemmSpec conv_param_grad_spec(const Bf16ConvLayer& l, uint64_t batch);
/// Splits the GEMM's fp32 [C*KH*KW + 1, O] result into dw and db.
void split_conv_param_grads(const Bf16ConvLayer& l, std::span<const float> gm, ConvParamGradResult& r);

/// dX of a strided Conv / AveragePool as stride_h * stride_w phase sub-convolutions (no MATMUL row
/// multiplies an inserted zero): output phase (py, px) — the dX pixels iy = py + s_h*j, ix = px +
/// s_w*i — is a stride-1 convolution of dy itself with the taps of the transposed layer
/// (conv_input_grad_layer) that land on dy pixels there, in their order (so the same fp32 sums:
/// the zero-insertion convolution only adds +0 for the others). A phase without such taps is +0.
struct InputGradPhase {
  uint32_t py = 0, px = 0;
  uint64_t rows = 0, cols = 0;  // dX pixels of the phase (ceil((H - py) / s_h) x ...)
  bool empty = false;           // no tap lands on dy: the phase is +0
  Bf16ConvLayer layer;          // in_c = out_c of the forward, input dy [ho][wo]; output >= rows x cols
  std::vector<uint64_t> fwd_tap;  // per tap of `layer`: the forward layer's tap it is (flipped)
};
/// The phases; empty when the layer has stride 1 or a phase would read dy from a positive offset
/// (a forward pad near the dilated kernel extent): then the zeros are inserted (insert_grad_zeros).
std::vector<InputGradPhase> conv_input_grad_phases(const Bf16ConvLayer& fwd);
/// Places one phase's convolution output (NCHW, its own geometry) into dx (NCHW [batch][C][H][W]).
void place_input_grad_phase(const Bf16ConvLayer& fwd, const InputGradPhase& ph, std::span<const float> y,
                            uint64_t batch, std::span<float> dx);

/// One VECTOR step of an element-wise program: the first reads a and b, the later ones the result.
struct VecStep {
  spec::VecOp op;
  uint32_t scalar = 0;
};
/// An element-wise program over `elems` values: a and b LOADed as fp32 ACC rows (chunks, double
/// buffered), the steps applied in order (results in b's rows), the result STOREd to out_addr.
std::vector<isa::Word> elementwise_program(const DeviceParams& dp, uint64_t elems, uint64_t a_addr, uint64_t b_addr,
                                           uint64_t out_addr, std::span<const VecStep> steps);

/// torch.optim.SGD on `elems` fp32 values resident in device memory, the VECTOR AXPY chain of
/// docs/numerics.md "SGD with momentum": w (master), v (momentum) and g (gradient) LOADed as ACC
/// rows per chunk; g = AXPY(w, wd, g) when wd != 0; v = AXPY(v, momentum, g), w = AXPY(v, -lr, w)
/// when momentum != 0, else w = AXPY(g, -lr, w); w (and v) STOREd back in place.
std::vector<isa::Word> sgd_program(const DeviceParams& dp, uint64_t elems, uint64_t w_addr, uint64_t v_addr,
                                   uint64_t g_addr, float lr, float momentum, float weight_decay);

/// The ReLU-backward program over `elems` values (buffers of ceil(elems/N) rows of N fp32 lanes).
std::vector<isa::Word> relu_backward_program(const DeviceParams& dp, uint64_t elems, uint64_t y_addr,
                                             uint64_t dy_addr, uint64_t out_addr);

/// The max-pool routing: the host image [m | bf16(dy) | tap 0 .. K-1], planes of ceil(P/N)*N fp32,
/// and the program writing the K tap-gradient planes to out_addr.
std::vector<float> max_pool_route_image(std::span<const float> m, std::span<const float> dy,
                                        std::span<const float> taps, uint32_t array_n);
std::vector<isa::Word> max_pool_route_program(const DeviceParams& dp, uint64_t P, uint64_t K, uint64_t in_addr,
                                              uint64_t out_addr);
/// Throws Error(kInvalidArgument) for inconsistent routing spans; returns K.
uint64_t max_pool_route_check(std::span<const float> m, std::span<const float> dy, std::span<const float> taps);

/// The one-hot forward layer whose input gradient scatters the tap gradients (overlapping windows),
/// and the tap gradients [K][P] as its output gradient NCHW [B][C*K][Ho][Wo].
Bf16ConvLayer max_pool_one_hot_layer(const Bf16ConvLayer& pool);
std::vector<float> max_pool_taps_as_channels(const Bf16ConvLayer& pool, std::span<const float> g, uint64_t batch);

/// The shape of conv_param_grads' direct dW program (train_programs.cpp): groups of columns of
/// [im2col | 1] (one per tap and input-channel block, the last the all-ones column), how many
/// share the ACC in one pass, and the pixels padded to whole blocks of N.
struct DirectDw {
  uint64_t groups = 0;
  uint64_t per_pass = 0, passes = 0, pp = 0;
};

/// Device programs compiled once per (slot, rows) and run again with new data: a slot is the
/// caller's name for one program of a step (a layer and a role); a different row count (the last
/// partial batch) gets its own entry. Weights are uploaded every run; a bf16 convolution is
/// recompiled only when its set of all-zero weight tiles changes. Not thread-safe; `device` must
/// outlive the cache.
class TrainProgramCache {
 public:
  explicit TrainProgramCache(Device& device) : device_(&device) {}

  /// run_conv2d_bf16's result (y, plan, perf, cycles, utilization, moved bytes); a max pool goes to
  /// max_pool().
  ConvBf16RunResult conv(uint64_t slot, const Bf16ConvLayer& l, std::span<const float> x, uint64_t batch);
  /// run_max_pool_bf16's result (the inference emitter, tpuw/runtime/maxpool.h: identity-weight taps
  /// + VECTOR MAX, contract max_pool_bf16_host), its program and identity tile kept per (slot, rows).
  ConvBf16RunResult max_pool(uint64_t slot, const Bf16ConvLayer& l, std::span<const float> x, uint64_t batch);
  /// gemm_bf16's result (c, plan, perf, cycles, utilization) for a spec without accumulate / z_out / sgd.
  Bf16GemmResult gemm(uint64_t slot, const Bf16GemmSpec& s, std::span<const float> a, std::span<const float> b,
                      std::span<const float> bias = {});
  ReluBackwardResult relu_backward(uint64_t slot, std::span<const float> y, std::span<const float> dy);
  /// add_bf16 (ADD, MAXS 0 with relu, ROUND_BF16); the result in `d`.
  ReluBackwardResult add(uint64_t slot, std::span<const float> a, std::span<const float> b, bool relu);
  MaxPoolRouteResult max_pool_route(uint64_t slot, std::span<const float> m, std::span<const float> dy,
                                    std::span<const float> taps);

  /// dW and db of the conv layer `l` with the im2col on the device (docs/training.md "Convolutions
  /// and pools"): per block j of N columns of [im2col(x) | 1] a bf16 convolution of x with one-hot
  /// weights (column tap*C + c takes channel c at that tap; the all-ones column is its bias 1.0, and a
  /// block of that column alone is a constant written once)
  /// writes the block as pixel rows [B*Ho*Wo][N] in device memory, and a bf16 GEMM (A transposed on
  /// the device, fp32 out) reads it there: [im2col | 1]^T . d for its N rows. x is the forward
  /// convolution's input, d the output gradient as pixel rows (conv_grad_rows). When the forward
  /// program `fwd_slot` has the same input layout its uploaded input is read in place. The values
  /// are conv_param_grads_bf16_host's (the same GEMM sums in the same order) for finite inputs that
  /// are not -0 (the identity MATMUL gives +0). Where the direct program (DwMode; docs/training.md
  /// "The direct dW GEMM") is estimated cheaper, or the one-hot blocks do not apply, it runs
  /// instead: no im2col, values conv_param_grads_bf16_host's bit for bit (-0 included). Returns
  /// false (and does nothing) where neither applies (one-hot blocks' output rows padded for the
  /// DMA, wo_stored != wo, and the direct program not fitting the device); the caller then lays out
  /// the im2col on the host.
  bool conv_param_grads(uint64_t slot, uint64_t fwd_slot, const Bf16ConvLayer& l, std::span<const float> x,
                        std::span<const float> d, uint64_t batch, ConvParamGradResult& r, uint64_t& macs);

  /// The input gradient of the Conv / AveragePool `fwd` (stride-1 or zero-insertion form: `t` is
  /// conv_input_grad_geometry(fwd), `z` its input, insert_grad_zeros) reading the weights where the
  /// forward program `fwd_slot` (conv(), this row count) uploaded them this step: the transposed
  /// layer's tile (ob, tap, cb) is the forward's tile (cb, taps - 1 - tap, ob) entering the array
  /// transposed (LOADW transpose), so the flip and transpose are addressing, not an upload; its
  /// all-zero tiles are the forward's. The same tiles, taps and order as the host-laid-out
  /// transposed layer: dX bit for bit. Returns false (and does nothing) when there is no such
  /// forward program.
  /// A stride phase (conv_input_grad_phases) passes its layer as `t` and its taps' forward taps
  /// as `fwd_tap` (empty: the whole flipped kernel, tap i is the forward's taps - 1 - i).
  bool conv_input_grad(uint64_t slot, uint64_t fwd_slot, const Bf16ConvLayer& fwd, const Bf16ConvLayer& t,
                       std::span<const float> z, uint64_t batch, ConvBf16RunResult& r,
                       std::span<const uint64_t> fwd_tap = {});

  /// How conv_param_grads forms dW: kAuto takes the direct program where its estimated cycles are
  /// fewer than the one-hot im2col's (tests force either).
  enum class DwMode : uint8_t { kAuto, kOneHot, kDirect };
  void set_dw_mode(DwMode m) { dw_mode_ = m; }
  /// Whether the last conv_param_grads ran the direct program.
  bool last_dw_direct() const { return last_dw_direct_; }

  /// Programs compiled so far (a figure for tests and benchmarks).
  uint64_t compiled() const { return compiled_; }

 private:
  struct Entry {
    std::vector<HostBuffer> bufs;
    std::vector<isa::Word> code;
    ConvPlan conv_plan;
    bool relu = false;
    Bf16GemmPlan gemm_plan;
    // conv_param_grads: the input buffer the im2col programs read, and per block of columns the
    // im2col convolution's and the GEMM's code and the GEMM's plan.
    uint64_t in_addr = 0;
    std::vector<std::vector<isa::Word>> codes;
    std::vector<Bf16GemmPlan> gemm_plans;
    bool direct = false;  // conv_param_grads' direct program (not the one-hot blocks)
    bool forward_conv = false;  // conv()'s program: in, weights, params, out (4 buffers)
  };
  bool conv_param_grads_direct(uint64_t slot, uint64_t fwd_slot, const Bf16ConvLayer& l, const ConvPlan& pf,
                               const DirectDw& dd, std::span<const float> x, std::span<const float> d,
                               uint64_t batch, ConvParamGradResult& r, uint64_t& macs);
  Entry* find(uint64_t slot, uint64_t rows);
  ReluBackwardResult elementwise(uint64_t slot, std::span<const float> a, std::span<const float> b,
                                 std::span<const VecStep> steps, const char* what);
  Entry& make(uint64_t slot, uint64_t rows);
  HostBuffer alloc(uint64_t bytes);
  PerfCounters run(const Entry& e);
  /// Runs `e` (a convolution or pool program, r.plan its plan) and fills r from the bf16 output
  /// image in `out`: y, perf, cycles, instructions, moved bytes (the caller sets min_bytes and
  /// utilization).
  void run_conv(const Entry& e, const HostBuffer& out, ConvBf16RunResult& r);

  Device* device_;
  std::map<std::pair<uint64_t, uint64_t>, Entry> entries_;
  uint64_t compiled_ = 0;
  DwMode dw_mode_ = DwMode::kAuto;
  bool last_dw_direct_ = false;
};

/// conv_input_grad_bf16 with the cache's programs: the stride phases (conv_input_grad_phases) in
/// slots slot + (i + 1) << 40, else the zero-insertion convolution in `slot`. `macs` (may be null)
/// gets the programs' multiply-accumulates; run.cycles is their sum (run's other figures: the last).
/// With `fwd_slot` (the layer's forward program in the cache, kNoSlot: none) the stride-1 /
/// zero-insertion form reads the forward's uploaded weights (TrainProgramCache::conv_input_grad).
constexpr uint64_t kNoSlot = ~uint64_t{0};
ConvInputGradResult conv_input_grad_cached(TrainProgramCache& cache, uint64_t slot, const Bf16ConvLayer& fwd,
                                           std::span<const float> dy, uint64_t batch, uint64_t* macs,
                                           uint64_t fwd_slot = kNoSlot);

/// Tap lanes (the CNN trainer, docs/training.md): a Conv with one input channel and 2 .. N taps as
/// a 1x1 convolution over its im2col, tap t (ky * KW + kx) in input channel t: the layer (in_c =
/// taps, in_h x in_w = the output's, the same weights, bias and ReLU) and its input, NCHW
/// [rows][taps][Ho][Wo] (+0 where the tap falls on padding). Its outputs and its dW are the
/// layer's bit for bit.
Bf16ConvLayer tap_lane_layer(const Bf16ConvLayer& l);
std::vector<float> tap_lane_input(const Bf16ConvLayer& l, std::span<const float> x, uint64_t rows);

/// conv_input_grad_layer without the weights (w empty): the transposed layer's geometry.
Bf16ConvLayer conv_input_grad_geometry(const Bf16ConvLayer& fwd);

/// max_pool_backward_bf16 with the cache's programs: the routing in `slot`, the scatter
/// convolution of overlapping windows in `slot` + 1.
MaxPoolBackwardResult max_pool_backward_cached(TrainProgramCache& cache, uint64_t slot, const Bf16ConvLayer& fwd,
                                               std::span<const float> x, std::span<const float> y,
                                               std::span<const float> dy, uint64_t batch);

}  // namespace tpuw::runtime::detail
