#include "loom/ir/graph.h"

#include <algorithm>

#include "loom/ir/derived_input.h"

namespace loom::ir {

TensorId Graph::add_tensor(FullTensor tensor) {
  tensor.id = TensorId(static_cast<std::uint32_t>(tensors.size()));
  tensors.push_back(std::move(tensor));
  return tensors.back().id;
}

OpId Graph::add_op(Op op) {
  op.id = OpId(static_cast<std::uint32_t>(ops.size()));
  ops.push_back(std::move(op));
  return ops.back().id;
}

std::vector<OpId> producers(const Graph& graph) {
  std::vector<OpId> result(graph.tensors.size());
  for (const Op& op : graph.ops)
    for (TensorId out : op.outputs)
      if (out.index() < result.size()) result[out.index()] = op.id;
  return result;
}

std::vector<char> optimizer_gradients(const Graph& graph) {
  std::vector<char> result(graph.tensors.size(), 0);
  for (const Op& op : graph.ops)
    if (op.pass == Pass::optimizer)
      for (TensorId in : op.inputs)
        if (graph.tensor(in).role == TensorRole::gradient) result[in.index()] = 1;
  return result;
}

bool is_gradient_of(const Graph& graph, TensorId id, TensorRole owner_role) {
  const FullTensor& t = graph.tensor(id);
  return t.role == TensorRole::gradient && t.owner.valid() && graph.tensor(t.owner).role == owner_role;
}

bool is_parameter_gradient(const Graph& graph, TensorId id) { return is_gradient_of(graph, id, TensorRole::parameter); }

std::vector<std::vector<OpId>> consumers(const Graph& graph) {
  std::vector<std::vector<OpId>> result(graph.tensors.size());
  for (const Op& op : graph.ops)
    for (TensorId in : op.inputs) {
      if (in.index() >= result.size()) continue;
      auto& list = result[in.index()];
      if (list.empty() || list.back() != op.id) list.push_back(op.id);
    }
  return result;
}

Expected<void> check_structure(const Graph& graph) {
  const std::size_t n = graph.tensors.size();
  for (std::size_t i = 0; i < n; ++i) {
    const FullTensor& t = graph.tensors[i];
    if (t.id.index() != i) return failf("tensor '{}' at index {} has id {}", t.name, i, t.id.value);
    for (std::int64_t d : t.shape.dims)
      if (d <= 0) return failf("tensor '{}' has non-positive size {} in shape {}", t.name, d, t.shape.to_string());
    if (t.owner.valid() && t.owner.index() >= n) return failf("tensor '{}' names owner #{} out of range", t.name, t.owner.value);
    if (t.updates.valid() && t.updates.index() >= n)
      return failf("tensor '{}' names updated tensor #{} out of range", t.name, t.updates.value);
  }
  // available[t]: t is readable at this point of program order.
  std::vector<char> available(n, 0), produced(n, 0);
  const auto mark_source = [&](TensorId id, std::string_view what) -> Expected<void> {
    if (!id.valid() || id.index() >= n) return failf("graph {} list names tensor #{} out of range", what, id.value);
    available[id.index()] = 1;
    return {};
  };
  for (TensorId id : graph.inputs) LOOM_RETURN_IF_ERROR(mark_source(id, "input"));
  for (TensorId id : graph.parameters) LOOM_RETURN_IF_ERROR(mark_source(id, "parameter"));
  for (const FullTensor& t : graph.tensors)
    if (((t.role == TensorRole::buffer || t.role == TensorRole::parameter) && !t.updates.valid()) ||
        t.role == TensorRole::input)
      available[t.id.index()] = 1;
  for (const FullTensor& t : graph.tensors)
    if (t.role == TensorRole::optimizer_state && !t.updates.valid()) available[t.id.index()] = 1;

  for (std::size_t i = 0; i < graph.ops.size(); ++i) {
    const Op& op = graph.ops[i];
    if (op.id.index() != i) return failf("op '{}' at index {} has id {}", op.name, i, op.id.value);
    if (op.mirror_of.valid() && op.mirror_of.index() >= i)
      return failf("backward op '{}' mirrors op #{}, which does not come before it", op.name, op.mirror_of.value);
    for (TensorId in : op.inputs) {
      if (!in.valid() || in.index() >= n) return failf("op '{}' reads tensor #{} out of range", op.name, in.value);
      if (!available[in.index()])
        return failf("op '{}' reads tensor '{}' before any op produces it", op.name, graph.tensor(in).name);
    }
    for (TensorId out : op.outputs) {
      if (!out.valid() || out.index() >= n) return failf("op '{}' writes tensor #{} out of range", op.name, out.value);
      if (produced[out.index()] || available[out.index()])
        return failf("tensor '{}' is written twice (second time by op '{}'); a graph is SSA",
                     graph.tensor(out).name, op.name);
      produced[out.index()] = available[out.index()] = 1;
    }
  }
  if (graph.loss.valid()) {
    if (graph.loss.index() >= n) return failf("loss names tensor #{} out of range", graph.loss.value);
    if (graph.tensor(graph.loss).shape.rank() != 0)
      return failf("loss tensor '{}' has shape {}, but a loss must be a scalar", graph.tensor(graph.loss).name,
                   graph.tensor(graph.loss).shape.to_string());
  }
  return check_derived_inputs(graph);
}

}  // namespace loom::ir
