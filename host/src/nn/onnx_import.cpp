// ONNX -> FloatNetwork through the graph compiler: import into the IR (tpuw/compiler/
// onnx_importer.h), run the pass pipeline, lower to the dense-layer chain (tpuw/compiler/passes.h).
#include "tpuw/nn/onnx_import.h"

#include "tpuw/compiler/onnx_importer.h"
#include "tpuw/compiler/passes.h"

namespace tpuw::nn {

FloatNetwork import_onnx_bytes(std::span<const uint8_t> bytes, std::string_view name) {
  return compiler::compile_float(compiler::import_onnx_graph(bytes, name));
}

FloatNetwork import_onnx(const std::filesystem::path& path) {
  return compiler::compile_float(compiler::import_onnx_file(path));
}

}  // namespace tpuw::nn
