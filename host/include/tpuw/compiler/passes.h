// The compiler's passes over the graph IR (tpuw/compiler/ir.h), each a small unit with its own
// tests (tests/unit/compiler). docs/compiler.md gives the pipeline and each pass's guarantee.
//
// Errors follow the importer's contract (tpuw/nn/onnx_import.h): a model that is inconsistent is
// Error(kBadFile), one that is valid but beyond what we support is Error(kUnsupported), both as
// "SOURCE: node 'NAME' (OP): what". A pass that finds its own invariant broken throws kInternal.
#pragma once

#include <cstdint>

#include "tpuw/compiler/ir.h"
#include "tpuw/nn/float_network.h"

namespace tpuw::compiler {

/// Legalization: every node is in the default domain, a known operator, with only the attributes
/// we implement, attribute values we support (Gemm transA=0, Dropout is_test!=0, ...), attribute
/// types as the operator defines them, and its number of inputs and outputs. Unknown operators
/// are reported here, naming the node and operator. Changes nothing.
void legalize(const Graph& g);

/// Shape inference: sets dtype and shape of every node output it can derive, the batch kept as
/// the symbol kBatch. Graph inputs take their declared shape with dimension 0 as the batch.
/// Lenient (strict = false): skips nodes whose inputs are not known yet (a Reshape whose shape
/// has not been folded). Strict: every live node output gets a shape, or the node is reported
/// (a Reshape or Flatten that moves or merges the batch dimension is refused, never reinterpreted).
void infer_shapes(Graph& g, bool strict);

/// Constant folding: a node whose inputs are all constants (Constant, Identity, Dropout, Gather,
/// Unsqueeze, Concat), or a Shape of a tensor whose shape is known, is evaluated and removed; its
/// outputs become constants (shape tensors may hold the batch symbol). So PyTorch's
/// `x.view(x.size(0), -1)` (Shape -> Gather -> Unsqueeze -> Concat -> Reshape) leaves a Reshape
/// by the constant [batch, -1]. Returns whether anything was folded.
bool fold_constants(Graph& g);

/// Identity and Dropout removal (inference: Dropout is the identity; a training_mode input must
/// be a constant false, the mask output must be unread), and of Reshape/Flatten nodes whose
/// output shape equals their input's. Readers are rewired; graph output names are kept.
void remove_identities(Graph& g);

/// Dead-code removal: drops nodes none of whose outputs is read by a node or a graph output, and
/// frees the data of constants nothing reads any more.
void remove_dead_code(Graph& g);

/// Fusion into the matrix op: every Gemm and MatMul becomes a kDense node (x [batch, k] times a
/// constant weight stored [k, n] in fp32, alpha applied), then absorbs a following Add of a
/// constant bias and a following Relu when it is their only reader. Refuses (kUnsupported) a
/// matrix op the device cannot run: a non-constant weight, W . x, an activation that is not
/// [batch, k].
void fuse_dense(Graph& g);

/// Several graph inputs (docs/network_compiler.md "Several graph inputs"): every input
/// [batch, F_k] float32, joined by a Concat of all of them along the features or (two inputs) by
/// an Add of a Dense of each (merged into one Dense over both, weights stacked, biases summed),
/// becomes one graph input whose row is theirs side by side; Graph::input_parts records each in
/// row order. False (nothing done) for one input; Error(kUnsupported) naming the inputs otherwise.
bool merge_graph_inputs(Graph& g);

/// Lowering to what the back end consumes today: the chain of dense layers (nn::FloatNetwork,
/// the float reference and calibration source; nn::quantize turns it into the device's
/// nn::QNetwork). Requires one float32 input, one output, and a chain from one to the other;
/// reports anything else (branches, operators after Softmax, ...) naming the node.
nn::FloatNetwork lower_to_float_network(const Graph& g);

/// The whole pipeline on an imported graph: legalize, shape inference and constant folding to a
/// fixed point, identity removal, dead-code removal, strict shape inference, fusion, dead-code
/// removal, lowering; verify() after every rewriting pass.
nn::FloatNetwork compile_float(Graph g);

/// The graph after every pass up to (not including) lowering: for dumps and tests.
Graph optimize(Graph g);

}  // namespace tpuw::compiler
