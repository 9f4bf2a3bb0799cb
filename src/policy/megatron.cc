// Megatron-LM's dp x tp x pp (policy.h): the configuration and the plan checked, then composed from the
// primitives and the plan helpers by the Composer (megatron_composer.h).
#include <algorithm>

#include <fmt/format.h>

#include "loom/plan/schedule.h"
#include "loom/policy/coshard.h"
#include "loom/policy/interlaced.h"
#include "loom/policy/layer_degrees.h"
#include "loom/policy/passes.h"
#include "loom/policy/policy.h"
#include "loom/policy/recompute_policy.h"
#include "loom/policy/stages.h"
#include "loom/policy/tensor_parallel.h"
#include "megatron_composer.h"

namespace loom::policy {
namespace {

using detail::schedule_kind;
using plan::Plan;

// Interleaving needs a pipeline, a 1F1B schedule, and micro-batches in groups of pp.
Expected<void> check_interleaving(const ParallelConfig& config) {
  if (config.virtual_stages < 1)
    return fail(fmt::format("virtual_stages is {}; it must be at least 1", config.virtual_stages));
  if (config.virtual_stages > 1 && config.pp == 1)
    return fail(fmt::format("{} model chunks per device need a pipeline, but pp is 1", config.virtual_stages),
                "set pp > 1, or leave virtual_stages at 1");
  if (plan::v_shaped(config.schedule) && config.virtual_stages != 2)
    return fail(fmt::format("schedule {} runs 2 model chunks per device in a V, not {}", plan::name(config.schedule),
                            config.virtual_stages),
                fmt::format("leave --interleave out ({} sets 2), or give 2", plan::name(config.schedule)));
  if (config.virtual_stages > 1 && config.schedule != plan::ScheduleKind::one_f_one_b &&
      !plan::places_chunks(config.schedule))
    return fail(fmt::format("{} model chunks per device need the interleaved 1F1B schedule, not {}",
                            config.virtual_stages,
                            config.schedule == plan::ScheduleKind::gpipe ? "GPipe" : plan::name(config.schedule)),
                "use the 1F1B schedule (interleaved when virtual_stages > 1)");
  if (schedule_kind(config) == plan::ScheduleKind::interleaved_one_f_one_b && config.micro_batches > 1 &&
      config.micro_batches % config.pp != 0)
    return fail(fmt::format("interleaved 1F1B: {} micro-batches are not a multiple of pp {}", config.micro_batches,
                            config.pp),
                "Megatron's interleaved schedule runs micro-batches in groups of pp; use a multiple of pp");
  return {};
}

// Coshard's layers and op classes choose what to split: without parts above 1 they would be ignored.
Expected<void> check_coshard(const CoshardConfig& coshard) {
  if (coshard.parts <= 1 && (coshard.layers || coshard.ops != CoshardOps{}))
    return fail(fmt::format("coshard layers or op classes given, but coshard is off ({} part per device)",
                            std::max(coshard.parts, 1)),
                "set the parts per device above 1 (--coshard C), or use the policy 'coshard'");
  return {};
}

// Per-layer degrees (layer_degrees.h) replace the one tp of the layers; the options that derive their
// splits or devices from that one tp are refused beside them.
Expected<void> check_layer_tp(const Plan& plan, const ParallelConfig& config) {
  if (config.layer_tp.empty()) return {};
  const std::string spec = to_string(runs_of(config.layer_tp));
  const std::pair<bool, const char*> refused[] = {{config.sequence_parallel, "sequence parallelism"},
                                                  {config.zero > 0, "ZeRO"},
                                                  {config.coshard.parts > 1, "coshard"},
                                                  {config.interlaced, "the interlaced pipeline"}};
  for (const auto& [on, what] : refused)
    if (on)
      return fail(fmt::format("tp layers {}: per-layer degrees do not combine with {}", spec, what),
                  fmt::format("drop --tp-layers, or {}", what));
  const std::vector<int> ordinals = layer_ordinals(*plan.graph);
  const int layers = ordinals.empty() ? 0 : std::ranges::max(ordinals) + 1;
  if (layers == 0)
    return fail(fmt::format("tp layers {}: '{}' has no numbered layers (op names like 'layers.3.attn')", spec,
                            plan.graph->name),
                "give per-layer degrees only to a model built of numbered layers");
  return check_layer_degrees(config.layer_tp, config.tp, layers);
}

Expected<void> check_fresh(const Plan& plan) {
  for (const ir::Op& op : plan.graph->ops) {
    const auto& parts = plan.parts[op.id.index()];
    if (parts.size() != 1 || plan.sub_op(parts.front()).device != plan::kUnassigned)
      return fail(fmt::format("op '{}' was already transformed or placed", op.name),
                  "apply a policy to a fresh plan (plan::make_plan)");
  }
  return {};
}

// The interlaced pipeline runs its shared ops (the table's lookups, the head and loss) on every device, so
// they weigh on no stage: the staged layers are balanced without them (a 250k-token head would otherwise
// leave the last stage with fewer layers than it can take).
ParallelConfig staged_costs(const Plan& plan, const ParallelConfig& config,
                            const std::optional<InterlacedLayout>& interlaced, const ir::OpCatalog& catalog) {
  ParallelConfig staged = config;
  if (!interlaced || config.pp == 1) return staged;
  const ir::Graph& graph = *plan.graph;
  if (staged.op_seconds.size() != graph.ops.size()) {
    Expected<std::vector<double>> flops = training_flops(graph, catalog);
    if (!flops) return staged;  // megatron_stages reports the FLOPs error itself
    staged.op_seconds = std::move(*flops);
  }
  for (const ir::Op& op : graph.ops)
    if (interlaced->roles[op.id.index()] != SharedRole::none) staged.op_seconds[op.id.index()] = 0;
  return staged;
}

}  // namespace

Expected<std::vector<int>> megatron_stages(const Plan& plan, const ParallelConfig& config,
                                           const ir::OpCatalog& catalog) {
  // Stages in program order, of whole layers (a cut inside a layer would send the partial sums of a
  // row-parallel output, not the reduced activation). Interleaved: pp x virtual_stages chunks of equal
  // layer counts, as Megatron-LM cuts them.
  if (config.virtual_stages > 1)
    return with_context(layer_stages(plan, config.pp * config.virtual_stages),
                        fmt::format("pp {} x {} model chunks", config.pp, config.virtual_stages));
  if (config.pp == 1) return pipeline_stages(plan, 1, catalog);
  const ir::Graph& graph = *plan.graph;
  std::vector<double> cost = config.op_seconds;
  if (cost.size() != graph.ops.size()) {
    LOOM_ASSIGN_OR_RETURN(cost, training_flops(graph, catalog));
  }
  const int layers = static_cast<int>(layer_costs(graph, cost).size());
  // Too few layers for whole-layer stages: balanced FLOPs, cut inside layers.
  if (layers < config.pp) return pipeline_stages(plan, config.pp, catalog);
  // Identical layers that divide: Megatron-LM's equal layer counts, which is also the balanced cut of
  // their own costs (and keeps the baseline what Megatron-LM runs). Layers that differ (Swin's
  // high-resolution blocks are memory-bound and cost more than their FLOPs say) or do not divide: whole
  // layers grouped so the slowest stage is as fast as it can be, embeddings and head counted with the
  // layer they join; the pipeline's step is set by its slowest stage.
  if (layers % config.pp == 0 && uniform_layers(graph, cost)) return layer_stages(plan, config.pp);
  return balanced_layer_stages(plan, config.pp, cost);
}

Expected<void> megatron(Plan& plan, const ParallelConfig& requested, const ir::OpCatalog& catalog,
                        PolicyNotes* notes) {
  // 3F1B pipelines the model's passes as its chunks (policy/passes.h).
  ParallelConfig config = requested;
  if (config.schedule == plan::ScheduleKind::three_f_one_b) {
    LOOM_ASSIGN_OR_RETURN(config, three_f_one_b_config(plan, config));
  }
  for (const auto& [name, value] : {std::pair{"dp", config.dp}, std::pair{"tp", config.tp}, std::pair{"pp", config.pp},
                                    std::pair{"micro_batches", config.micro_batches}})
    if (value < 1) return fail(fmt::format("{} is {}; it must be at least 1", name, value));
  // Bounds that keep the plan finite (every op gets micro_batches x dp x tp parts per stage).
  constexpr std::int64_t kMaxParts = std::int64_t{1} << 16;
  const std::int64_t devices = std::int64_t{config.dp} * config.tp * config.pp;
  if (devices > kMaxParts || std::int64_t{config.micro_batches} * config.dp * config.tp > kMaxParts)
    return fail(fmt::format("dp {} x tp {} x pp {} with {} micro-batches is over Loom's limit of {} devices or parts "
                            "per op",
                            config.dp, config.tp, config.pp, config.micro_batches, kMaxParts));
  LOOM_RETURN_IF_ERROR(check_interleaving(config));
  if (config.interlaced) LOOM_RETURN_IF_ERROR(check_interlaced(config));
  LOOM_RETURN_IF_ERROR(check_fresh(plan));
  LOOM_RETURN_IF_ERROR(check_layer_tp(plan, config));
  LOOM_ASSIGN_OR_RETURN(TensorParallelLayout tensor_parallel,
                        tensor_parallel_layout(plan, config.tp, config.sequence_parallel));
  std::optional<InterlacedLayout> interlaced;
  if (config.interlaced) {
    LOOM_ASSIGN_OR_RETURN(interlaced, interlaced_layout(plan, config.tp * config.pp));
  }
  LOOM_ASSIGN_OR_RETURN(std::vector<int> stages, megatron_stages(plan, staged_costs(plan, config, interlaced, catalog),
                                                                 catalog));
  LOOM_RETURN_IF_ERROR(check_coshard(config.coshard));
  LOOM_ASSIGN_OR_RETURN(CoshardPlan coshard, coshard_plan(plan, config.coshard, config.tp, catalog));
  detail::Composer composer(plan, config, std::move(tensor_parallel), std::move(stages), std::move(coshard),
                            std::move(interlaced));
  LOOM_RETURN_IF_ERROR(composer.run());
  if (notes != nullptr) notes->schedule = composer.interlaced_order();
  return apply_recompute(plan, config.recompute, catalog);
}

}  // namespace loom::policy
