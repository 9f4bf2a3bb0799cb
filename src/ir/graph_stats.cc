#include "loom/ir/graph_stats.h"

#include <cstdint>
#include <map>

#include "loom/core/checked_math.h"
#include "loom/ir/autograd.h"

namespace loom::ir {

Expected<std::vector<double>> op_flops(const Graph& graph, const OpCatalog& catalog) {
  std::vector<double> flops(graph.ops.size(), 0.0);
  for (const Op& op : graph.ops) {
    const OpDef* def = catalog.find(op.type);
    if (def == nullptr)
      return fail(fmt::format("op '{}' has unknown type '{}'", op.name, op.type), "`loom ops` lists the known types");
    if (op.is_mirror()) {
      flops[op.id.index()] = def->backward.flops_factor * flops_share(grad_part(op)) * flops[op.mirror_of.index()];
      continue;
    }
    std::vector<Shape> shapes;
    std::vector<DType> dtypes;
    for (TensorId in : op.inputs) {
      shapes.push_back(graph.tensor(in).shape);
      dtypes.push_back(graph.tensor(in).dtype);
    }
    LOOM_ASSIGN_OR_RETURN(ResolvedOp resolved,
                          with_context(resolve_op(*def, op.attrs, shapes, dtypes), fmt::format("op '{}'", op.name)));
    flops[op.id.index()] = forward_flops(*def, op.attrs, shapes, dtypes, resolved);
  }
  return flops;
}

Expected<GraphStats> compute_stats(const Graph& graph, const OpCatalog& catalog) {
  GraphStats stats;
  LOOM_ASSIGN_OR_RETURN(std::vector<double> flops, op_flops(graph, catalog));
  for (const Op& op : graph.ops) {
    const auto pass = static_cast<std::size_t>(op.pass);
    ++stats.ops[pass];
    stats.flops[pass] += flops[op.id.index()];
  }
  // The final gradient of a parameter is the last one created for it (partials come first).
  std::map<std::uint32_t, TensorId> final_gradient;
  std::vector<char> forward_output(graph.tensors.size(), 0), read_by_backward(graph.tensors.size(), 0);
  for (const Op& op : graph.ops) {
    if (op.pass == Pass::forward)
      for (TensorId out : op.outputs) forward_output[out.index()] = 1;
    if (op.pass == Pass::backward)
      for (TensorId in : op.inputs) read_by_backward[in.index()] = 1;
  }
  for (const FullTensor& t : graph.tensors) {
    switch (t.role) {
      case TensorRole::parameter:
        if (!t.updates.valid()) {
          stats.parameter_count = checked_add(stats.parameter_count, t.shape.numel()).value_or(INT64_MAX);
          stats.parameter_bytes += static_cast<double>(t.bytes());
        }
        break;
      case TensorRole::gradient:
        if (is_parameter_gradient(graph, t.id)) final_gradient[t.owner.value] = t.id;
        break;
      case TensorRole::optimizer_state:
        if (!t.updates.valid()) stats.optimizer_state_bytes += static_cast<double>(t.bytes());
        break;
      case TensorRole::input: stats.input_bytes += static_cast<double>(t.bytes()); break;
      case TensorRole::activation:
        if (forward_output[t.id.index()]) {
          stats.activation_bytes += static_cast<double>(t.bytes());
          if (read_by_backward[t.id.index()]) stats.saved_activation_bytes += static_cast<double>(t.bytes());
        }
        break;
      case TensorRole::buffer: break;
    }
  }
  for (const auto& [param, grad] : final_gradient) stats.gradient_bytes += static_cast<double>(graph.tensor(grad).bytes());
  return stats;
}

std::int64_t batch_of(const Graph& graph) {
  if (graph.inputs.empty() || graph.tensor(graph.inputs.front()).shape.rank() == 0) return 0;
  return graph.tensor(graph.inputs.front()).shape[0];
}

}  // namespace loom::ir
