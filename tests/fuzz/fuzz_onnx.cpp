// libFuzzer target: the ONNX importer (tpuw::nn::import_onnx_bytes). Any bytes give a
// FloatNetwork or tpuw::Error (kBadFile / kUnsupported), never a crash, a hang or undefined
// behaviour.
#include <cstdint>
#include <span>

#include "tpuw/error.h"
#include "tpuw/nn/onnx_import.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    (void)tpuw::nn::import_onnx_bytes(std::span<const uint8_t>(data, size), "fuzz.onnx");
  } catch (const tpuw::Error&) {
  }
  return 0;
}
