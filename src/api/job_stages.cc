// The stages after loading (job.h): the policy, materialization (with the fold), and the simulation.
#include <algorithm>

#include <fmt/format.h>

#include "loom/api/baseline_search.h"
#include "loom/policy/layer_degrees.h"
#include "loom/api/job.h"
#include "loom/cost/compute_model.h"
#include "loom/exec/check.h"
#include "loom/exec/device_classes.h"
#include "loom/policy/policy.h"
#include "loom/sim/durations.h"
#include "loom/sim/shared_cores.h"
#include "stage_clock.h"
#include "loom/api/stage_costs.h"

namespace loom::api {
namespace {

std::string_view schedule_name(const policy::ParallelConfig& c) {
  if (c.pp == 1) return "";
  if (c.virtual_stages > 1 && !plan::v_shaped(c.schedule)) return "interleaved 1f1b";
  return plan::name(c.schedule);
}

// The slice's degrees: one replica (or every one, `keeps_replicas`), one micro-batch.
policy::ParallelConfig slice_config(policy::ParallelConfig config, bool keeps_replicas) {
  if (!keeps_replicas) config.dp = 1;
  config.micro_batches = 1;
  return config;
}

// How the slice unfolds into the job's step: the schedule template of the full micro-batch count. A
// slice that keeps the replicas (ZeRO) counts them in tp (exec/fold.h).
Expected<exec::FoldShape> fold_shape(const policy::ParallelConfig& c, std::vector<int> op_stage, bool keeps_replicas,
                                     int gpus_per_node) {
  const plan::Schedule schedule{
      .kind = c.virtual_stages > 1 && !plan::v_shaped(c.schedule) ? plan::ScheduleKind::interleaved_one_f_one_b
                                                                            : c.schedule,
      .chunks = c.virtual_stages};
  exec::FoldShape shape{.dp = keeps_replicas ? 1 : c.dp, .tp = keeps_replicas ? c.dp * c.tp : c.tp, .pp = c.pp,
                        .chunks = c.virtual_stages, .micro_batches = c.micro_batches, .sequences = {},
                        .op_stage = std::move(op_stage), .scatter_per_micro_batch = c.zero >= 2,
                        .devices_per_node = gpus_per_node};
  LOOM_ASSIGN_OR_RETURN(shape.sequences, plan::schedule_blocks(schedule, c.pp, c.micro_batches));
  return shape;
}

std::string_view name(Stage stage) {
  switch (stage) {
    case Stage::loaded: return "loaded";
    case Stage::planned: return "planned";
    case Stage::materialized: return "materialized";
    case Stage::simulated: return "simulated";
  }
  return "?";
}

Expected<void> expect_stage(const Job& job, Stage needed, std::string_view what) {
  if (job.stage != needed)
    return fail(fmt::format("{} needs a {} job, this one is {}", what, name(needed), name(job.stage)),
                "run the job's stages in order: load_job, apply_policy, materialize, simulate");
  return {};
}

// The exec passes as the options set them.
exec::ExecPassOptions pass_options(const JobOptions& o) {
  exec::ExecPassOptions options;
  options.bucket_bytes = static_cast<std::int64_t>(o.bucket_cap_mb * (1 << 20));
  options.first_bucket_bytes = std::min(options.first_bucket_bytes, options.bucket_bytes);
  options.prefetch_depth = o.prefetch_depth;
  options.overlap_collectives = o.overlap != policy::Overlap::none;
  options.offload = o.offload;
  return options;
}

}  // namespace

std::string describe(const std::string& policy, const policy::ParallelConfig& c) {
  std::string text = fmt::format("{}: dp {} x tp {} x pp {}", policy, c.dp, c.tp, c.pp);
  if (c.micro_batches > 1) text += fmt::format(", {} micro-batches", c.micro_batches);
  if (c.pp > 1) text += fmt::format(", {}", schedule_name(c));
  if (c.virtual_stages > 1) text += fmt::format(" x {} chunks", c.virtual_stages);
  if (c.block_order != plan::BlockOrder::strict) text += fmt::format(", {} block order", plan::name(c.block_order));
  if (c.sequence_parallel) text += ", sequence parallel";
  if (c.zero > 0) text += fmt::format(", ZeRO-{}", c.zero);
  if (c.recompute != policy::Recompute::none) text += fmt::format(", {} recompute", policy::name(c.recompute));
  if (c.coshard.parts > 1 || policy == "coshard")
    text += fmt::format(", coshard {} on layers {} ({})", c.coshard.parts > 0 ? c.coshard.parts : policy::kDefaultParts,
                        c.coshard.layers ? policy::to_string(*c.coshard.layers)
                                         : std::string(policy == "coshard" ? "the first quarter" : "all"),
                        policy::to_string(c.coshard.ops));
  if (c.overlap != policy::Overlap::none) text += fmt::format(", {} overlap", policy::name(c.overlap));
  if (!c.layer_tp.empty()) text += fmt::format(", tp layers {}", policy::to_string(policy::runs_of(c.layer_tp)));
  return text;
}

Expected<void> apply_policy(Job& job) {
  LOOM_RETURN_IF_ERROR(expect_stage(job, Stage::loaded, "apply_policy"));
  if (is_search(job.options.policy))
    return fail(fmt::format("{} is a search, not a policy", job.options.policy), "plan it with plan_or_search");
  return apply_policy(job, [&](plan::Plan& plan, const policy::ParallelConfig& config) -> Expected<void> {
    policy::PolicyNotes notes;
    LOOM_RETURN_IF_ERROR(with_context(policy::apply_policy(plan, job.options.policy, config, job.catalog, &notes),
                                      fmt::format("policy {}", job.options.policy)));
    if (!notes.schedule.empty()) job.description += ", " + notes.schedule;
    return {};
  });
}

Expected<void> apply_policy(Job& job, const PolicyFunction& policy) {
  LOOM_RETURN_IF_ERROR(expect_stage(job, Stage::loaded, "apply_policy"));
  const StageClock clock;
  policy::ParallelConfig config = job.request.config;
  // ZeRO's shards in node-major order where dp spans nodes (ParallelConfig::zero_node_ranks): dp ranks of
  // one tp rank are consecutive, tp apart, so a node holds gpus_per_node / tp of them.
  if (config.zero > 0 && config.zero_node_ranks == 0 && config.tp > 0 && job.cluster.gpus_per_node % config.tp == 0)
    config.zero_node_ranks = job.cluster.gpus_per_node / config.tp;
  if (balances_stages(config)) {
    // The one-stage plan that prices the layers is a helper, not the job: where it cannot be planned
    // (degrees the policy refuses, a model it cannot split) the stages fall back to training FLOPs and
    // the job's own plan below reports what is wrong with it.
    if (Expected<ForwardOpCosts> costs = forward_op_costs(job, config)) {
      config.op_seconds = std::move(costs->seconds);
      // The interlaced order bounds the micro-batches each stage holds by these bytes (policy/interlaced.h).
      if (job.options.policy == "interlaced") config.op_bytes = std::move(costs->bytes);
    }
  }
  LOOM_ASSIGN_OR_RETURN(job.plan, plan::make_plan(job.graph, job.catalog));
  std::vector<int> op_stage;
  if (job.folded) {
    LOOM_ASSIGN_OR_RETURN(op_stage, policy::megatron_stages(job.plan, config, job.catalog));
    LOOM_ASSIGN_OR_RETURN(job.step.shape, fold_shape(config, std::move(op_stage), job.slice_keeps_replicas,
                                                           job.cluster.gpus_per_node));
  }
  const policy::ParallelConfig applied = job.folded ? slice_config(config, job.slice_keeps_replicas) : config;
  LOOM_RETURN_IF_ERROR(policy(job.plan, applied));
  if (job.options.offload != exec::Offload::none)
    job.description += fmt::format(", ZeRO-Offload ({})", exec::name(job.options.offload));
  job.slice_devices = policy::device_count(applied);
  job.seconds.policy = clock.seconds();
  job.stage = Stage::planned;
  return {};
}

const exec::ExecPlan& step_programs(const Job& job) { return job.folded ? job.step.step : job.exec; }

Expected<void> materialize(Job& job) {
  LOOM_RETURN_IF_ERROR(expect_stage(job, Stage::planned, "materialize"));
  const StageClock clock;
  exec::MaterializeOptions options;
  options.cluster = job.layout_cluster;
  options.use_layout_search = job.options.layout_search;
  options.recompute_collectives = job.options.recompute_collectives;
  // A shrunk model's tensors are tiny: price moves by bandwidth alone, so they move as the full-size
  // ones would (latency would make every move a p2p send).
  if (job.options.shrink) options.cost_model = exec::bandwidth_only_cost(job.layout_cluster);
  LOOM_ASSIGN_OR_RETURN(exec::Materialized materialized,
                        with_context(exec::materialize(job.plan, job.slice_devices, options), "materializing the plan"));
  exec::ExecPlan& made = job.folded ? job.slice : job.exec;
  made = std::move(materialized.exec);
  job.materialize_stats = std::move(materialized.stats);
  LOOM_RETURN_IF_ERROR(with_context(exec::check_exec_plan(made), "checking the ExecPlan"));
  if (job.options.exec_passes) {
    job.passes = exec::run_exec_passes(made, pass_options(job.options));
    LOOM_RETURN_IF_ERROR(with_context(exec::check_exec_plan(made), "checking the ExecPlan after the exec passes"));
  }
  exec::assign_device_classes(made);
  if (job.folded) {
    LOOM_ASSIGN_OR_RETURN(job.step, with_context(exec::unfold_step(job.slice, job.step.shape),
                                                 "unfolding the step"));
    if (job.options.exec_passes) {
      const exec::ExecPassStats step = exec::run_exec_passes(job.step, pass_options(job.options));
      job.passes.buckets += step.buckets;
      job.passes.bucketed_reductions += step.bucketed_reductions;
    }
  }
  job.seconds.materialize = clock.seconds();
  job.stage = Stage::materialized;
  return {};
}

Expected<void> simulate(Job& job) {
  LOOM_RETURN_IF_ERROR(expect_stage(job, Stage::materialized, "simulate"));
  const StageClock clock;
  LOOM_ASSIGN_OR_RETURN(cost::ComputeModel compute,
                        cost::ComputeModel::make(job.plan, job.catalog, job.cluster.gpu,
                                                 job.profile ? &*job.profile : nullptr));
  // Processes sharing cores (a CPU cluster) slow each other by how many compute at once (sim/shared_cores.h).
  LOOM_ASSIGN_OR_RETURN(job.sim, with_context(sim::simulate_sharing_cores(
                                                  step_programs(job), compute, job.cluster,
                                                  {.contention = job.cluster.comm_contention},
                                                  [&](const sim::Durations& durations) {
                                                    return job.folded ? sim::simulate(job.step, durations)
                                                                      : sim::simulate(job.exec, durations);
                                                  }),
                                              "simulating the plan"));
  job.memory = job.folded ? cost::memory_usage(job.step) : cost::memory_usage(job.exec);
  sim::Workload workload = job.workload;
  const policy::ParallelConfig& c = job.request.config;
  workload.graph_copies = job.folded ? static_cast<double>(job.slice_keeps_replicas ? 1 : c.dp) * c.micro_batches : 1;
  LOOM_ASSIGN_OR_RETURN(job.metrics,
                        sim::step_metrics(step_programs(job), job.sim, job.memory, job.cluster.gpu, job.catalog, workload));
  job.seconds.simulate = clock.seconds();
  job.stage = Stage::simulated;
  return {};
}

Expected<std::unique_ptr<Job>> plan_job(const JobOptions& options) {
  const StageClock clock;
  LOOM_ASSIGN_OR_RETURN(std::unique_ptr<Job> job, load_job(options));
  LOOM_RETURN_IF_ERROR(apply_policy(*job));
  LOOM_RETURN_IF_ERROR(materialize(*job));
  LOOM_RETURN_IF_ERROR(simulate(*job));
  job->seconds.total = clock.seconds();
  return job;
}

}  // namespace loom::api
