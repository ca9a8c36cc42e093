// nn::quantize (tpuw/nn/quantize.h): the compiler's quantize pass (tpuw/compiler/quantize.h) run on
// the IR of the float network, lowered back to the QNetwork the back end consumes.
#include "tpuw/compiler/quantize.h"
#include "tpuw/nn/quantize.h"

namespace tpuw::nn {

QNetwork quantize(const FloatNetwork& net, std::span<const float> calib, uint64_t rows) {
  compiler::Graph g = compiler::graph_of_float_network(net);
  compiler::quantize(g, calib, rows);
  QNetwork q = compiler::lower_to_qnetwork(g);
  q.host_steps = net.host_steps;  // after the int32 output: nothing to calibrate
  return q;
}

}  // namespace tpuw::nn
