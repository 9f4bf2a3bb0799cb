// split_weight_gradients (autograd.h): a backward op computing parameter and other gradients becomes its
// input part B and its weight part W, in one sweep that renumbers the ops after each split.
#include <algorithm>

#include "loom/ir/autograd.h"

namespace loom::ir {
namespace {

bool is_parameter(const Graph& graph, TensorId t) { return graph.tensor(t).role == TensorRole::parameter; }

// The part of `whole` that computes the gradients at positions `keep` of its grad_inputs.
Op part_of(const Op& whole, const MirrorLayout& layout, const std::vector<std::size_t>& keep, GradPart part) {
  Op result = whole;
  result.name = fmt::format("{}.{}", whole.name, name(part));
  result.outputs.clear();
  std::vector<std::int64_t> grad_inputs;
  for (std::size_t q : keep) {
    result.outputs.push_back(whole.outputs[q]);
    grad_inputs.push_back(layout.grad_inputs[q]);
  }
  result.attrs["grad_inputs"] = grad_inputs;
  result.attrs["grad_part"] = std::string(name(part));
  return result;
}

}  // namespace

Expected<Graph> split_weight_gradients(const Graph& graph) {
  Graph result = graph;
  result.ops.clear();
  std::vector<OpId> new_id(graph.ops.size());
  const auto append = [&](Op op) {
    if (op.mirror_of.valid()) op.mirror_of = new_id[op.mirror_of.index()];
    result.add_op(std::move(op));
  };
  for (const Op& op : graph.ops) {
    new_id[op.id.index()] = OpId(static_cast<std::uint32_t>(result.ops.size()));
    if (!op.is_mirror()) {
      append(op);
      continue;
    }
    LOOM_ASSIGN_OR_RETURN(const MirrorLayout layout, mirror_layout(op));
    const Op& forward = graph.op(op.mirror_of);
    std::vector<std::size_t> inputs, weights;
    for (std::size_t q = 0; q < layout.grad_inputs.size(); ++q) {
      const auto i = static_cast<std::size_t>(layout.grad_inputs[q]);
      if (i >= forward.inputs.size())
        return fail(fmt::format("backward op '{}': grad_inputs names input {}, but op '{}' has {} inputs", op.name, i,
                                forward.name, forward.inputs.size()));
      (is_parameter(graph, forward.inputs[i]) ? weights : inputs).push_back(q);
    }
    if (layout.part != GradPart::whole || inputs.empty() || weights.empty()) {
      append(op);
      continue;
    }
    append(part_of(op, layout, inputs, GradPart::input));
    append(part_of(op, layout, weights, GradPart::weight));
  }
  return result;
}

}  // namespace loom::ir
