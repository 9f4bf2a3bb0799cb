#include "loom/policy/zero.h"

#include <map>

#include <fmt/format.h>

#include "loom/plan/residence.h"

namespace loom::policy {
namespace {

using plan::Plan;
using plan::SubOpId;

// The identifier ZeRO splits a step's shard along: the first dimension of its parameter output that dp
// divides (dimension 0 when it can, so each shard is contiguous in row-major memory).
std::optional<std::string> shard_identifier(const Plan& plan, SubOpId part, int dp) {
  const plan::SubTensor& out = plan.sub_op(part).outputs.front();
  for (std::size_t d = 0; d < out.box.size(); ++d)
    if (out.box[d].size() % dp == 0)
      if (auto x = plan::dim_identifier(plan, part, true, 0, d)) return x;
  return std::nullopt;
}

// The dp rank holding shard `shard` of dp (ParallelConfig::zero_node_ranks): node-major where the ranks
// span nodes, so shard l x nodes + n lies on node n's rank l.
int shard_rank(const ParallelConfig& config, int shard) {
  const int per_node = config.zero_node_ranks;
  if (per_node <= 1 || config.dp <= per_node || config.dp % per_node != 0) return shard;
  const int nodes = config.dp / per_node;
  return shard % nodes * per_node + shard / nodes;
}

Expected<std::vector<SubOpId>> split(Plan& plan, SubOpId piece, const plan::TransAlgo& algo, int n) {
  if (n == 1) return std::vector<SubOpId>{piece};
  return plan::trans(plan, piece, algo, n);
}

}  // namespace

Expected<void> place_zero_step(Plan& plan, SubOpId step, const plan::TransAlgo& tensor, const ParallelConfig& config,
                               const std::function<int(int, int)>& device, const LocalSplit& local) {
  if (config.zero < 1 || config.zero > 3)
    return fail(fmt::format("ZeRO stage {} does not exist", config.zero), "use stage 1, 2 or 3 (0 turns ZeRO off)");
  const ir::Op& op = plan.op_of(step);
  if (op.pass != ir::Pass::optimizer || op.inputs.size() < 2)
    return fail(fmt::format("ZeRO: '{}' is not an optimizer step", op.name));
  LOOM_ASSIGN_OR_RETURN(const std::vector<SubOpId> tp_parts, split(plan, step, tensor, config.tp));
  for (int j = 0; j < config.tp; ++j) {
    LOOM_ASSIGN_OR_RETURN(const std::vector<SubOpId> local_parts,
                          split(plan, tp_parts[static_cast<std::size_t>(j)], local.algo, local.parts));
    for (const SubOpId local_part : local_parts) {
      const std::optional<std::string> x =
          config.dp > 1 ? shard_identifier(plan, local_part, config.dp) : std::nullopt;
      const plan::TransAlgo data = x ? plan::TransAlgo{plan::SplitAlgo{*x}} : plan::TransAlgo{plan::ReplicateAlgo{}};
      LOOM_ASSIGN_OR_RETURN(const std::vector<SubOpId> dp_parts, split(plan, local_part, data, config.dp));
      for (int r = 0; r < config.dp; ++r)
        LOOM_RETURN_IF_ERROR(
            plan::assign(plan, dp_parts[static_cast<std::size_t>(r)], device(shard_rank(config, r), j)));
    }
  }
  if (config.zero >= 2) LOOM_RETURN_IF_ERROR(plan::set_residence(plan, op.inputs[1], plan::Residence::optimizer_shards));
  if (config.zero >= 3) LOOM_RETURN_IF_ERROR(plan::set_residence(plan, op.inputs[0], plan::Residence::optimizer_shards));
  return {};
}

std::vector<std::string> zero_notes(const Plan& plan, const ParallelConfig& config) {
  std::vector<std::string> notes;
  if (config.zero == 0 || config.dp == 1) return notes;
  const ir::Graph& graph = *plan.graph;
  for (const ir::Op& op : graph.ops) {
    if (op.pass != ir::Pass::optimizer) continue;
    // Parts of one pipeline stage and tp rank (devices differing in their dp rank alone) updating the
    // same box: the step is replicated over dp.
    std::map<std::pair<int, int>, std::vector<const plan::SubTensor*>> boxes;
    bool replicated = false;
    for (SubOpId id : plan.parts[op.id.index()]) {
      const plan::SubOp& s = plan.sub_op(id);
      auto& seen = boxes[{s.device / (config.dp * config.tp), s.device % config.tp}];
      for (const plan::SubTensor* other : seen) replicated |= plan::same_piece(*other, s.outputs.front(), false);
      seen.push_back(&s.outputs.front());
    }
    if (!replicated) continue;
    const ir::FullTensor& parameter = graph.tensor(op.inputs.front());
    const plan::SubTensor& shard = plan.sub_op(plan.parts[op.id.index()].front()).outputs.front();
    notes.push_back(fmt::format("'{}' {}: no dimension of its shard {} divisible by dp {}; its optimizer step and "
                                "states stay replicated over dp",
                                parameter.name, parameter.shape.to_string(), shard.local_shape().to_string(), config.dp));
  }
  return notes;
}

}  // namespace loom::policy
