// Shared helpers of the compiler tests: models from onnx_builder.h imported into the IR.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "onnx_builder.h"
#include "tpuw/compiler/ir.h"
#include "tpuw/compiler/onnx_importer.h"
#include "tpuw/compiler/passes.h"

namespace tpuw::compiler::testing {

using nn::testing::ModelBuilder;
using nn::testing::random_floats;

inline Graph graph_of(const ModelBuilder& mb, const std::string& name = "m.onnx") {
  const std::string b = mb.bytes();
  return import_onnx_graph({reinterpret_cast<const uint8_t*>(b.data()), b.size()}, name);
}

/// The node with this name (fails the test when there is none).
inline const Node& node_named(const Graph& g, const std::string& name) {
  for (const Node& n : g.nodes) {
    if (n.name == name) return n;
  }
  ADD_FAILURE() << "no node " << name;
  static const Node none;
  return none;
}

inline std::vector<std::string> op_types(const Graph& g) {
  std::vector<std::string> r;
  for (const Node& n : g.nodes) r.push_back(n.op_type);
  return r;
}

/// Runs `f` and checks that it throws Error(kind) whose message contains every part.
template <typename F>
void expect_error(F&& f, ErrorKind kind, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    for (const auto& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what() << " / " << p;
  }
}

inline void add_bool_init(ModelBuilder& mb, const std::string& name, bool v) {
  auto* t = mb.graph().add_initializer();
  t->set_name(name);
  t->set_data_type(onnx::TensorProto_DataType_BOOL);
  t->add_int32_data(v ? 1 : 0);
}

inline onnx::NodeProto& add_constant_i64(ModelBuilder& mb, const std::string& out, const std::vector<int64_t>& v,
                                         bool scalar = false) {
  auto& c = mb.node("Constant", {}, {out});
  auto* a = c.add_attribute();
  a->set_name("value");
  a->set_type(onnx::AttributeProto_AttributeType_TENSOR);
  a->mutable_t()->set_data_type(onnx::TensorProto_DataType_INT64);
  if (!scalar) a->mutable_t()->add_dims(static_cast<int64_t>(v.size()));
  for (const int64_t x : v) a->mutable_t()->add_int64_data(x);
  return c;
}

}  // namespace tpuw::compiler::testing
