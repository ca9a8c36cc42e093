// Network compiler, part 3 of 4: packing and unpacking the host images (input, weights, params,
// outputs; layouts in docs/network_compiler.md).
#include <fmt/format.h>

#include <algorithm>

#include "tpuw/activate.h"
#include "tpuw/error.h"
#include "tpuw/runtime/network.h"

namespace tpuw::runtime {

std::vector<int8_t> pack_network_input(const NetworkPlan& p, std::span<const int8_t> x) {
  const uint64_t an = p.array_n, K = p.layers[0].k, kbn = p.layers[0].k_blocks;
  if (x.size() != p.batch * K) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("network input has {} elements, expected batch*k = {}*{}", x.size(), p.batch, K));
  }
  std::vector<int8_t> out(p.input_bytes, 0);
  for (uint64_t mt = 0; mt < p.m_tiles; ++mt) {
    const uint64_t rows = p.rows_of_tile(mt);
    for (uint64_t kb = 0; kb < kbn; ++kb) {
      int8_t* block = out.data() + mt * p.m_tile * kbn * an + kb * rows * an;
      const uint64_t k0 = kb * an, kw = std::min(an, K - k0);
      for (uint64_t r = 0; r < rows && mt * p.m_tile + r < p.batch; ++r) {
        std::copy_n(x.data() + (mt * p.m_tile + r) * K + k0, kw, block + r * an);
      }
    }
  }
  return out;
}

namespace {

// The host image layout of a tensor (int8 activations) or of the final output (int32): per M tile,
// per N-wide column block, a [rows x N] block; the model's `features` columns come back row-major.
template <typename T>
std::vector<T> unpack_blocks(const NetworkPlan& p, std::span<const T> image, uint64_t features) {
  const uint64_t an = p.array_n, nbn = (features + an - 1) / an;
  std::vector<T> out(p.batch * features);
  for (uint64_t mt = 0; mt < p.m_tiles; ++mt) {
    const uint64_t rows = p.rows_of_tile(mt);
    for (uint64_t nb = 0; nb < nbn; ++nb) {
      const T* block = image.data() + mt * p.m_tile * nbn * an + nb * rows * an;
      const uint64_t n0 = nb * an, nw = std::min(an, features - n0);
      for (uint64_t r = 0; r < rows && mt * p.m_tile + r < p.batch; ++r) {
        std::copy_n(block + r * an, nw, out.data() + (mt * p.m_tile + r) * features + n0);
      }
    }
  }
  return out;
}

}  // namespace

std::vector<int8_t> unpack_network_tensor(const NetworkPlan& p, std::span<const int8_t> image, uint64_t features) {
  return unpack_blocks(p, image, features);
}

std::vector<int32_t> unpack_network_output(const NetworkPlan& p, std::span<const int32_t> image) {
  return unpack_blocks(p, image, p.layers.back().n);
}

std::vector<int8_t> pack_network_weights(const NetworkPlan& p, const nn::QNetwork& net) {
  const uint64_t an = p.array_n;
  std::vector<int8_t> out(p.weight_bytes, 0);
  for (size_t l = 0; l < p.layers.size(); ++l) {
    const NetworkLayerPlan& lp = p.layers[l];
    const std::vector<int8_t>& w = net.layers[l].w_q;
    for (uint64_t nb = 0; nb < lp.n_blocks; ++nb) {
      for (uint64_t kb = 0; kb < lp.k_blocks; ++kb) {
        int8_t* tile = out.data() + lp.weight_offset + (nb * lp.k_blocks + kb) * an * an;
        const uint64_t n0 = nb * an, nw = std::min(an, lp.n - n0);
        for (uint64_t r = 0; r < an && kb * an + r < lp.k; ++r) {
          std::copy_n(w.data() + (kb * an + r) * lp.n + n0, nw, tile + r * an);
        }
      }
    }
  }
  return out;
}

std::vector<int32_t> pack_network_params(const NetworkPlan& p, const nn::QNetwork& net) {
  const uint64_t an = p.array_n;
  std::vector<int32_t> out(p.param_bytes / 4, 0);
  for (size_t l = 0; l < p.layers.size(); ++l) {
    const NetworkLayerPlan& lp = p.layers[l];
    const nn::QLayer& q = net.layers[l];
    for (uint64_t nb = 0; nb < lp.n_blocks; ++nb) {
      int32_t* rows = out.data() + lp.param_offset / 4 + nb * lp.param_rows * an;
      for (uint64_t j = 0; j < an && nb * an + j < lp.n; ++j) {
        const uint64_t c = nb * an + j;
        rows[j] = q.bias_q[c];
        if (!lp.final_int32) {
          rows[an + j] = q.mult[c];
          rows[2 * an + j] = q.shift[c];
        }
      }
      if (lp.lut) {  // the table after the shift row, the same for every n-block
        LutTable t{};
        std::copy(q.lut.begin(), q.lut.end(), t.begin());
        const std::vector<uint32_t> words = lut_acc_words(t, an);
        for (size_t w = 0; w < words.size(); ++w) rows[3 * an + w] = static_cast<int32_t>(words[w]);
      }
    }
  }
  return out;
}

}  // namespace tpuw::runtime
