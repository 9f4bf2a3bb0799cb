// Reading a planned plan against constraints (plan_constraints.h): what the policy did, from the sub-ops'
// boxes and devices alone, independent of the tensor-parallel layout and stage functions the checker asks.
#include "loom/plan/batch.h"
#include "loom/search/plan_constraints.h"

namespace loom::search {
namespace {

// The identifiers a part holds less than whole of (the batch's excepted), and how many pieces.
void read_splits(const plan::Plan& plan, const plan::SubOp& part, const ir::Annotation& annotation,
                 const std::optional<std::string>& batch, std::map<std::string, std::int64_t>& splits) {
  const auto read = [&](const std::vector<plan::SubTensor>& pieces, const std::vector<ir::TensorAnnotation>& tensors) {
    for (std::size_t t = 0; t < pieces.size() && t < tensors.size(); ++t) {
      const ir::TensorAnnotation& a = tensors[t];
      if (a.opaque || a.dims.size() != pieces[t].box.size()) continue;
      const ir::Shape& shape = plan.graph->tensor(pieces[t].tensor).shape;
      for (std::size_t d = 0; d < a.dims.size(); ++d) {
        const ir::DimAtom& atom = a.dims[d].atoms.front();
        const std::int64_t held = pieces[t].box[d].size();
        if (atom.kind != ir::DimAtom::Kind::identifier || atom.name == batch || held <= 0 || held >= shape.dims[d])
          continue;
        std::int64_t& pieces_of = splits[atom.name];
        pieces_of = std::max(pieces_of, shape.dims[d] / held);
      }
    }
  };
  read(part.inputs, annotation.inputs);
  read(part.outputs, annotation.outputs);
}

}  // namespace

std::vector<PlannedOp> planned_ops(const plan::Plan& plan, const policy::ParallelConfig& config) {
  const std::vector<std::optional<std::string>> batch = plan::batch_identifiers(plan);
  const int per_stage = std::max(1, config.dp * config.tp);
  std::vector<PlannedOp> out(plan.graph->ops.size());
  for (const ir::Op& op : plan.graph->ops) {
    if (op.pass != ir::Pass::forward) continue;
    PlannedOp& planned = out[op.id.index()];
    for (plan::SubOpId id : plan.parts[op.id.index()]) {
      const plan::SubOp& part = plan.sub_op(id);
      read_splits(plan, part, plan.layouts[op.id.index()].annotation, batch[op.id.index()], planned.splits);
      if (part.device >= 0) planned.ranks.push_back(part.device / per_stage);
    }
    std::ranges::sort(planned.ranks);
    planned.ranks.erase(std::ranges::unique(planned.ranks).begin(), planned.ranks.end());
  }
  return out;
}

std::vector<Violation> plan_violations(const PlanConstraints& constraints, const plan::Plan& plan,
                                       const policy::ParallelConfig& config) {
  const std::vector<PlannedOp> planned = planned_ops(plan, config);
  std::vector<Violation> out;
  const auto first_op = [&](const std::vector<OpPattern>& patterns, auto broken) {
    for (const ir::Op& op : plan.graph->ops)
      if (op.pass == ir::Pass::forward && std::ranges::any_of(patterns, [&](const OpPattern& p) { return matches(p, op); }))
        if (std::string why = broken(op, planned[op.id.index()]); !why.empty()) return why;
    return std::string();
  };
  for (const PartitionRule& rule : constraints.partition) {
    std::string why = first_op(rule.ops, [&](const ir::Op& op, const PlannedOp& p) -> std::string {
      if (p.splits.empty()) return rule.replicate ? "" : fmt::format("op '{}' is whole", op.name);
      for (const auto& [id, pieces] : p.splits) {
        if (std::ranges::find(rule.dims, id) == rule.dims.end())
          return fmt::format("op '{}' is split along '{}'", op.name, id);
        if (!rule.degrees.empty() && std::ranges::find(rule.degrees, pieces) == rule.degrees.end())
          return fmt::format("op '{}' is split {} ways", op.name, pieces);
      }
      return "";
    });
    if (!why.empty()) out.push_back({rule.entry, std::move(why)});
  }
  for (const ReplicateRule& rule : constraints.replicate) {
    std::string why = first_op(rule.ops, [&](const ir::Op& op, const PlannedOp& p) {
      return p.splits.empty() ? std::string() : fmt::format("op '{}' is split along '{}'", op.name, p.splits.begin()->first);
    });
    if (!why.empty()) out.push_back({rule.entry, std::move(why)});
  }
  for (const PlacementRule& rule : constraints.placement) {
    std::string why = first_op({rule.ops}, [&](const ir::Op& op, const PlannedOp& p) {
      return p.ranks == std::vector<int>{rule.stage} ? std::string()
                                                     : fmt::format("op '{}' runs on another stage", op.name);
    });
    if (!why.empty()) out.push_back({rule.entry, std::move(why)});
  }
  return out;
}

}  // namespace loom::search
