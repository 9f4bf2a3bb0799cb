// A sharding applied with the primitives (apply_sharding.h).
#include "loom/search/apply_sharding.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <functional>

#include "loom/plan/primitives.h"

namespace loom::search {
namespace {

using plan::Plan;
using plan::SubOpId;
using plan::TransAlgo;

// Splits every sub-op of `level` along the algorithm of axis `axis` (n == 1 keeps it), in device order:
// part k of sub-op p becomes device p * n + k, which over both axes is i * b + j.
Expected<std::vector<SubOpId>> split_level(Plan& plan, const std::vector<SubOpId>& level, const TransAlgo& algo,
                                           int n) {
  if (n == 1) return level;
  std::vector<SubOpId> next;
  next.reserve(level.size() * static_cast<std::size_t>(n));
  for (SubOpId piece : level) {
    LOOM_ASSIGN_OR_RETURN(std::vector<SubOpId> parts, plan::trans(plan, piece, algo, n));
    next.insert(next.end(), parts.begin(), parts.end());
  }
  return next;
}

// The sub-op split along each axis by `algo_of(axis)`, its parts assigned by device.
Expected<std::vector<SubOpId>> split_over_mesh(Plan& plan, SubOpId sub_op, const DeviceMesh& mesh,
                                               const std::function<TransAlgo(std::size_t)>& algo_of) {
  std::vector<SubOpId> parts{sub_op};
  for (std::size_t axis = 0; axis < mesh.axes.size(); ++axis) {
    LOOM_ASSIGN_OR_RETURN(parts, split_level(plan, parts, algo_of(axis), mesh.axes[axis]));
  }
  for (std::size_t k = 0; k < parts.size(); ++k) LOOM_RETURN_IF_ERROR(plan::assign(plan, parts[k], static_cast<int>(k)));
  return parts;
}

}  // namespace

int DeviceMesh::size() const {
  int n = 1;
  for (int a : axes) n *= a;
  return n;
}

Expected<void> check_mesh(const DeviceMesh& mesh) {
  if (mesh.axes.empty() || mesh.axes.size() > 2)
    return fail(fmt::format("a device mesh has 1 or 2 axes, this one {}", mesh.axes.size()),
                "give n devices as {n} or a x b devices as {a, b}");
  for (int a : mesh.axes)
    if (a < 1) return fail(fmt::format("device mesh {}: an axis of {} devices", to_string(mesh), a),
                           "every axis holds at least 1 device");
  if (mesh.size() > (1 << 16))
    return fail(fmt::format("device mesh {} has {} devices, over Loom's limit of {}", to_string(mesh), mesh.size(),
                            1 << 16));
  return {};
}

std::string to_string(const DeviceMesh& mesh) { return fmt::format("{}", fmt::join(mesh.axes, "x")); }

std::string to_string(const OpStrategy& strategy) {
  const auto one = [](const std::optional<std::string>& x) { return x ? "split " + *x : std::string("replicate"); };
  if (strategy.axes.size() == 1) return one(strategy.axes.front());
  std::vector<std::string> parts;
  for (const auto& x : strategy.axes) parts.push_back(one(x));
  return fmt::format("({})", fmt::join(parts, ", "));
}

OpStrategy replicated(const DeviceMesh& mesh) { return OpStrategy{std::vector<std::optional<std::string>>(mesh.axes.size())}; }

Expected<std::vector<SubOpId>> shard_op(Plan& plan, SubOpId sub_op, const OpStrategy& strategy, const DeviceMesh& mesh) {
  if (strategy.axes.size() != mesh.axes.size())
    return fail(fmt::format("op '{}': strategy {} has {} axes for a mesh of {}", plan.op_of(sub_op).name,
                            to_string(strategy), strategy.axes.size(), mesh.axes.size()));
  return with_context(split_over_mesh(plan, sub_op, mesh,
                                      [&](std::size_t axis) -> TransAlgo {
                                        const auto& x = strategy.axes[axis];
                                        if (x) return plan::SplitAlgo{*x};
                                        return plan::ReplicateAlgo{.redundant_backward = true};
                                      }),
                      fmt::format("op '{}' ({})", plan.op_of(sub_op).name, to_string(strategy)));
}

TensorSplit tensor_split(const Plan& plan, SubOpId sub_op, bool output, std::size_t tensor, const OpStrategy& strategy) {
  const ir::Op& op = plan.op_of(sub_op);
  const ir::TensorId id = output ? op.outputs[tensor] : op.inputs[tensor];
  const std::size_t rank = plan.graph->tensor(id).shape.rank();
  TensorSplit split(strategy.axes.size());
  for (std::size_t axis = 0; axis < strategy.axes.size(); ++axis) {
    if (!strategy.axes[axis]) continue;
    for (std::size_t d = 0; d < rank; ++d)
      if (plan::dim_identifier(plan, sub_op, output, tensor, d) == strategy.axes[axis]) {
        split[axis] = static_cast<int>(d);
        break;
      }
  }
  return split;
}

Expected<std::vector<SubOpId>> shard_follower(Plan& plan, SubOpId sub_op, const TensorSplit& owner,
                                              const DeviceMesh& mesh) {
  const ir::Op& op = plan.op_of(sub_op);
  const auto algo_of = [&](std::size_t axis) -> TransAlgo {
    if (axis < owner.size() && owner[axis] && !op.outputs.empty() &&
        static_cast<std::size_t>(*owner[axis]) < plan.graph->tensor(op.outputs.front()).shape.rank())
      if (auto x = plan::dim_identifier(plan, sub_op, true, 0, static_cast<std::size_t>(*owner[axis])))
        return plan::SplitAlgo{*x};
    return plan::ReplicateAlgo{};
  };
  return with_context(split_over_mesh(plan, sub_op, mesh, algo_of), fmt::format("placing '{}'", op.name));
}

ir::TensorId follower_owner(const ir::Graph& graph, const ir::Op& op) {
  if (op.pass == ir::Pass::optimizer) return op.inputs.front();
  return op.outputs.empty() ? ir::TensorId{} : graph.tensor(op.outputs.front()).owner;
}

std::vector<ir::OpId> first_parameter_readers(const Plan& plan) {
  const ir::Graph& graph = *plan.graph;
  std::vector<ir::OpId> reader(graph.tensors.size());
  for (const ir::Op& op : graph.ops) {
    if (op.pass != ir::Pass::forward) continue;
    for (std::size_t i = 0; i < op.inputs.size(); ++i) {
      const ir::TensorId t = op.inputs[i];
      if (graph.tensor(t).role == ir::TensorRole::parameter && !reader[t.index()].valid() &&
          !plan.layouts[op.id.index()].shape_only(i))
        reader[t.index()] = op.id;
    }
  }
  return reader;
}

Expected<Plan> apply_sharding(const ir::Graph& graph, const ir::OpCatalog& catalog, const DeviceMesh& mesh,
                              std::span<const OpStrategy> strategies) {
  LOOM_RETURN_IF_ERROR(check_mesh(mesh));
  if (strategies.size() != graph.ops.size())
    return fail(fmt::format("{} op strategies for a graph of {} ops", strategies.size(), graph.ops.size()),
                "give one strategy per op (by OpId)");
  LOOM_ASSIGN_OR_RETURN(Plan plan, plan::make_plan(graph, catalog));
  // Where each tensor lies: activations as their producer writes them, parameters as their first reader
  // reads them (its optimizer step follows; a later reader with another split gets them moved).
  std::vector<TensorSplit> splits(graph.tensors.size());
  const std::vector<ir::OpId> first_reader = first_parameter_readers(plan);
  for (const ir::Op& op : graph.ops) {
    if (op.pass != ir::Pass::forward) continue;
    const OpStrategy& strategy = strategies[op.id.index()];
    const SubOpId whole = plan.parts[op.id.index()].front();
    for (std::size_t j = 0; j < op.outputs.size(); ++j)
      splits[op.outputs[j].index()] = tensor_split(plan, whole, true, j, strategy);
    for (std::size_t i = 0; i < op.inputs.size(); ++i)
      if (first_reader[op.inputs[i].index()] == op.id && splits[op.inputs[i].index()].empty())
        splits[op.inputs[i].index()] = tensor_split(plan, whole, false, i, strategy);
    LOOM_RETURN_IF_ERROR(shard_op(plan, whole, strategy, mesh));
  }
  for (const ir::Op& op : graph.ops) {
    if (op.pass == ir::Pass::forward || op.is_mirror()) continue;
    const ir::TensorId owner = follower_owner(graph, op);
    const TensorSplit none;
    LOOM_RETURN_IF_ERROR(shard_follower(plan, plan.parts[op.id.index()].front(),
                                        owner.valid() ? splits[owner.index()] : none, mesh));
  }
  return plan;
}

}  // namespace loom::search
