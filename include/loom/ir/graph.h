// A Graph is the single-device training program: FullTensors and Ops in program order, SSA
// (each FullTensor produced by at most one op; inputs, parameters and buffers by none).
#pragma once

#include <span>
#include <string>
#include <vector>

#include "loom/core/error.h"
#include "loom/ir/op.h"
#include "loom/ir/tensor.h"

namespace loom::ir {

struct Graph {
  std::string name;
  std::vector<FullTensor> tensors;  // indexed by TensorId
  std::vector<Op> ops;              // indexed by OpId, in program order
  std::vector<TensorId> inputs;     // data the step is fed (tokens, labels, images)
  std::vector<TensorId> parameters; // trainable weights, in creation order
  TensorId loss;                    // the scalar the backward pass differentiates

  const FullTensor& tensor(TensorId id) const { return tensors[id.index()]; }
  FullTensor& tensor(TensorId id) { return tensors[id.index()]; }
  const Op& op(OpId id) const { return ops[id.index()]; }
  Op& op(OpId id) { return ops[id.index()]; }

  // Appends and assigns the id.
  TensorId add_tensor(FullTensor tensor);
  OpId add_op(Op op);

  bool operator==(const Graph&) const = default;
};

// producer[t] = the op writing tensor t (invalid for inputs, parameters, buffers).
std::vector<OpId> producers(const Graph& graph);
// consumers[t] = the ops reading tensor t, in program order (an op reading t twice appears once).
std::vector<std::vector<OpId>> consumers(const Graph& graph);
// By TensorId: 1 for the gradients optimizer steps read (each parameter's final gradient).
std::vector<char> optimizer_gradients(const Graph& graph);

// Whether tensor `id` is the gradient of a tensor of role `owner_role`: of a parameter (reduced across
// data-parallel replicas once per step, by the gradient buckets) or of an activation (a partial sum of the
// step's compute, which tensor parallelism reduces where it is made).
bool is_gradient_of(const Graph& graph, TensorId id, TensorRole owner_role);
// is_gradient_of a parameter.
bool is_parameter_gradient(const Graph& graph, TensorId id);

// Structural checks that need no operator registry: ids in range and equal to their index,
// SSA, every op input produced earlier in program order (or a graph input/parameter/buffer),
// the loss a scalar. Errors name the op or tensor.
Expected<void> check_structure(const Graph& graph);

}  // namespace loom::ir
