// The Composer (megatron_composer.h): what it derives from the graph before placing anything, and the
// order of its work: forward ops, then the ops that follow them, then each pipeline's schedule.
#include "megatron_composer.h"

#include <algorithm>

#include "loom/ir/graph.h"
#include "loom/plan/batch.h"
#include "loom/policy/stages.h"

namespace loom::policy::detail {
namespace {

using plan::Plan;
using plan::SubOpId;

// By TensorId, the stage of its first forward reader or writer (0 when none).
std::vector<int> tensor_stages(const ir::Graph& graph, const std::vector<int>& op_stage) {
  std::vector<int> stage(graph.tensors.size(), -1);
  for (const ir::Op& op : graph.ops) {
    if (op.pass != ir::Pass::forward) continue;
    for (const auto* list : {&op.inputs, &op.outputs})
      for (ir::TensorId t : *list)
        if (stage[t.index()] < 0) stage[t.index()] = op_stage[op.id.index()];
  }
  for (int& s : stage) s = std::max(s, 0);
  return stage;
}

// By OpId, forward ops: the layer's degree from config.layer_tp, tp outside the layers (and without it).
std::vector<int> op_degrees(const ir::Graph& graph, const ParallelConfig& config) {
  std::vector<int> degree(graph.ops.size(), config.tp);
  if (config.layer_tp.empty()) return degree;
  const std::vector<int> layer = policy::layer_ordinals(graph);
  for (std::size_t i = 0; i < graph.ops.size(); ++i)
    if (layer[i] >= 0 && static_cast<std::size_t>(layer[i]) < config.layer_tp.size())
      degree[i] = config.layer_tp[static_cast<std::size_t>(layer[i])];
  return degree;
}

// By TensorId: the degree of its first forward reader or writer (tp when none).
std::vector<int> tensor_degrees(const ir::Graph& graph, const std::vector<int>& op_degree, int tp) {
  std::vector<int> degree = tensor_stages(graph, op_degree);
  for (int& d : degree) d = d > 0 ? d : tp;
  return degree;
}

// The pipeline rank of each op from its stage in program order: chunk c of rank s is stage c * pp + s.
std::vector<int> pipeline_ranks(std::vector<int> stages, const ParallelConfig& config) {
  for (int& s : stages)
    if (s >= 0) s = plan::pipeline_device(schedule_kind(config), s, config.pp);
  return stages;
}

}  // namespace

Expected<std::vector<SubOpId>> split(Plan& plan, SubOpId piece, const plan::TransAlgo& algo, int n) {
  if (n == 1) return std::vector<SubOpId>{piece};
  return plan::trans(plan, piece, algo, n);
}

Composer::Composer(Plan& plan, const ParallelConfig& config, TensorParallelLayout tensor_parallel, std::vector<int> stages,
                   CoshardPlan coshard, std::optional<InterlacedLayout> interlaced)
    : plan_(plan),
      graph_(*plan.graph),
      c_(config),
      tp_layout_(std::move(tensor_parallel)),
      virtual_stage_(std::move(stages)),
      stage_(pipeline_ranks(virtual_stage_, config)),
      tensor_stage_(tensor_stages(graph_, stage_)),
      op_tp_(op_degrees(graph_, config)),
      tensor_tp_(tensor_degrees(graph_, op_tp_, config.tp)),
      batch_(plan::batch_identifiers(plan)),
      batch_dims_(plan::tensor_batch_dims(plan, batch_)),
      producers_(ir::producers(*plan.graph)),
      blocks_(static_cast<std::size_t>(device_count(config) * config.virtual_stages),
              std::vector<std::vector<SubOpId>>(static_cast<std::size_t>(config.micro_batches))),
      coshard_(std::move(coshard)),
      chains_(plan.graph->ops.size()),
      interlaced_(std::move(interlaced)) {}

Expected<void> Composer::run() {
  LOOM_RETURN_IF_ERROR(check_batch());
  LOOM_ASSIGN_OR_RETURN(std::vector<std::vector<SubOpId>> pieces, micro_batches());
  for (const ir::Op& op : graph_.ops)
    if (op.pass == ir::Pass::forward) LOOM_RETURN_IF_ERROR(place_forward(op, pieces[op.id.index()]));
  for (const ir::Op& op : graph_.ops)
    if (op.pass != ir::Pass::forward && !op.is_mirror()) LOOM_RETURN_IF_ERROR(place_follower(op));
  LOOM_RETURN_IF_ERROR(schedule());
  return order_coshard_chains();
}

}  // namespace loom::policy::detail
