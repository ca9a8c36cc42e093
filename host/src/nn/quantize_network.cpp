// nn::quantize (tpuw/nn/quantize.h): the compiler's quantize pass (tpuw/compiler/quantize.h) run on
// the IR of the float network, lowered back to the QNetwork the back end consumes.
#include "tpuw/compiler/quantize.h"
#include "tpuw/nn/quantize.h"

namespace tpuw::nn {

QNetwork quantize(const FloatNetwork& net, std::span<const float> calib, uint64_t rows) {
  compiler::Graph g = compiler::graph_of_float_network(net);
  // Host steps on the input run before the device: calibrate on the rows the device reads.
  const std::vector<float> c =
      net.input_steps.empty() ? std::vector<float>{} : apply_input_steps(net.input_steps, calib, net.input_features);
  compiler::quantize(g, net.input_steps.empty() ? calib : std::span<const float>(c), rows);
  QNetwork q = compiler::lower_to_qnetwork(g);
  q.input_steps = net.input_steps;
  q.host_steps = net.host_steps;  // after the int32 output: nothing to calibrate
  return q;
}

}  // namespace tpuw::nn
