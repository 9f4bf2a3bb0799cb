#include "loom/ir/leaf_values.h"

#include <string_view>

#include "loom/ir/attribute.h"

namespace loom::ir {
namespace {

bool is_optimizer(std::string_view type) { return type == "sgd" || type == "adam" || type == "adamw"; }

// Ops that move an integer tensor's elements without changing them.
bool keeps_values(std::string_view type) {
  for (std::string_view t : {"reshape", "view", "flatten", "squeeze", "unsqueeze", "slice", "contiguous", "identity",
                             "transpose", "permute", "expand", "chunk", "split"})
    if (type == t) return true;
  return false;
}

std::int64_t bound_of(const Graph& graph, TensorId id, int depth) {
  for (const Op& op : graph.ops) {
    if (op.type == "embedding" && op.inputs.size() == 2 && op.inputs[0] == id) return graph.tensor(op.inputs[1]).shape[0];
    const bool classifies = op.type == "cross_entropy" || op.type == "nll_loss" || op.type == "target_logit" ||
                            op.type == "cross_entropy_parts";
    if (classifies && op.inputs.size() >= 2 && op.inputs[1] == id) return graph.tensor(op.inputs[0]).shape.dims.back();
  }
  if (depth > 0)
    for (const Op& op : graph.ops)
      if (keeps_values(op.type) && !op.inputs.empty() && op.inputs[0] == id)
        for (TensorId out : op.outputs)
          if (const std::int64_t bound = bound_of(graph, out, depth - 1); bound != 2) return bound;
  return 2;
}

}  // namespace

std::int64_t integer_bound(const Graph& graph, TensorId id) { return bound_of(graph, id, 8); }

TensorId master_copy_of(const Graph& graph, TensorId id) {
  for (const Op& op : graph.ops) {
    if (!is_optimizer(op.type) || op.inputs.size() < 3 || op.inputs[2] != id) continue;
    if (get_bool_or(op.attrs, "master_weights", false).value_or(false)) return op.inputs[0];
  }
  return {};
}

}  // namespace loom::ir
