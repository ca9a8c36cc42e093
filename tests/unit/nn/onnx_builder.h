// Builds small ONNX models in C++ with the protobuf API (no Python at test time).
#pragma once

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "tpuw/nn/onnx_import.h"

namespace tpuw::nn::testing {

class ModelBuilder {
 public:
  explicit ModelBuilder(int64_t opset = 13) {
    model_.set_ir_version(8);
    model_.set_producer_name("tpuw-test");
    auto* os = model_.add_opset_import();
    os->set_domain("");
    os->set_version(opset);
  }

  onnx::GraphProto& graph() { return *model_.mutable_graph(); }
  onnx::ModelProto& model() { return model_; }

  /// A float input; dims < 0 are symbolic ("batch").
  ModelBuilder& input(const std::string& name, const std::vector<int64_t>& dims,
                      int elem = onnx::TensorProto_DataType_FLOAT) {
    auto* vi = graph().add_input();
    vi->set_name(name);
    auto* tt = vi->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(elem);
    for (const int64_t d : dims) {
      auto* dim = tt->mutable_shape()->add_dim();
      if (d < 0) dim->set_dim_param("batch"); else dim->set_dim_value(d);
    }
    return *this;
  }
  ModelBuilder& output(const std::string& name) {
    auto* vi = graph().add_output();
    vi->set_name(name);
    vi->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto_DataType_FLOAT);
    return *this;
  }

  static onnx::TensorProto tensor(const std::string& name, const std::vector<int64_t>& dims,
                                  const std::vector<float>& data, bool raw) {
    onnx::TensorProto t;
    t.set_name(name);
    t.set_data_type(onnx::TensorProto_DataType_FLOAT);
    for (const int64_t d : dims) t.add_dims(d);
    if (raw) {
      t.set_raw_data(std::string(reinterpret_cast<const char*>(data.data()), data.size() * sizeof(float)));
    } else {
      for (const float v : data) t.add_float_data(v);
    }
    return t;
  }
  ModelBuilder& init(const std::string& name, const std::vector<int64_t>& dims, const std::vector<float>& data,
                     bool raw = true) {
    *graph().add_initializer() = tensor(name, dims, data, raw);
    return *this;
  }
  ModelBuilder& init_i64(const std::string& name, const std::vector<int64_t>& data) {
    auto* t = graph().add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto_DataType_INT64);
    t->add_dims(static_cast<int64_t>(data.size()));
    for (const int64_t v : data) t->add_int64_data(v);
    return *this;
  }

  onnx::NodeProto& node(const std::string& op, const std::vector<std::string>& inputs,
                        const std::vector<std::string>& outputs, const std::string& name = "") {
    auto* n = graph().add_node();
    n->set_op_type(op);
    n->set_name(name.empty() ? op + "_" + std::to_string(graph().node_size() - 1) : name);
    for (const auto& i : inputs) n->add_input(i);
    for (const auto& o : outputs) n->add_output(o);
    return *n;
  }
  static void attr_i(onnx::NodeProto& n, const std::string& name, int64_t v) {
    auto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto_AttributeType_INT);
    a->set_i(v);
  }
  static void attr_f(onnx::NodeProto& n, const std::string& name, float v) {
    auto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto_AttributeType_FLOAT);
    a->set_f(v);
  }
  static void attr_ints(onnx::NodeProto& n, const std::string& name, const std::vector<int64_t>& v) {
    auto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto_AttributeType_INTS);
    for (const int64_t x : v) a->add_ints(x);
  }
  static void attr_s(onnx::NodeProto& n, const std::string& name, const std::string& v) {
    auto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto_AttributeType_STRING);
    a->set_s(v);
  }

  std::string bytes() const { return model_.SerializeAsString(); }
  FloatNetwork import(const std::string& name = "test.onnx") const {
    const std::string b = bytes();
    return import_onnx_bytes({reinterpret_cast<const uint8_t*>(b.data()), b.size()}, name);
  }

 private:
  onnx::ModelProto model_;
};

inline std::vector<float> random_floats(size_t n, float lo, float hi, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

}  // namespace tpuw::nn::testing
