#include "loom/api/plan_job.h"

#include <chrono>
#include <filesystem>

#include <fmt/format.h>

#include "loom/cluster/presets.h"
#include "loom/core/atomic_file.h"
#include "loom/cost/compute_model.h"
#include "loom/cost/profile_db.h"
#include "loom/exec/check.h"
#include "loom/exec/device_classes.h"
#include "loom/exec/exec_json.h"
#include "loom/exec/fold.h"
#include "loom/frontend/graph_file.h"
#include "loom/ops/custom_ops.h"
#include "loom/ops/registry.h"
#include "loom/plan/plan_json.h"
#include "loom/sim/chrome_trace.h"
#include "loom/sim/durations.h"
#include "loom/sim/html_report.h"

namespace loom::api {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::string_view schedule_name(const policy::ParallelConfig& c) {
  if (c.pp == 1) return "";
  if (c.virtual_stages > 1) return "interleaved 1f1b";
  return c.schedule == plan::ScheduleKind::gpipe ? "gpipe" : "1f1b";
}

Expected<void> check_devices(const PlanRequest& request, const cluster::Cluster& cluster) {
  const int devices = policy::device_count(request.config);
  if (request.gpus > 0 && devices != request.gpus)
    return fail(fmt::format("the degrees (dp {} x tp {} x pp {}) use {} GPUs, not --gpus {}", request.config.dp,
                            request.config.tp, request.config.pp, devices, request.gpus),
                "give degrees whose product is the GPU count");
  if (devices > cluster.device_count())
    return fail(fmt::format("the plan needs {} GPUs, cluster '{}' has {}", devices, cluster.name, cluster.device_count()),
                "pick a larger cluster (`loom clusters`) or smaller degrees");
  return {};
}

// The samples and tokens one step processes: the batch of the graph's first input, times its second
// dimension for token models (an integer input: token ids).
sim::Workload workload_of(const ir::Graph& graph) {
  sim::Workload w;
  if (graph.inputs.empty()) return w;
  const ir::FullTensor& first = graph.tensor(graph.inputs.front());
  if (first.shape.rank() == 0) return w;
  w.samples_per_step = static_cast<double>(first.shape[0]);
  if (!ir::is_floating(first.dtype) && first.shape.rank() >= 2)
    w.tokens_per_step = static_cast<double>(first.shape[0] * first.shape[1]);
  return w;
}

}  // namespace

bool plans_a_graph(const PlanRequest& request) { return !request.graph_file.empty() || !request.graph_text.empty(); }

Expected<ir::Graph> load_forward(const PlanRequest& request, ops::CustomCatalog& catalog) {
  const int sources = !request.model.empty() + !request.graph_file.empty() + !request.graph_text.empty();
  if (sources != 1)
    return fail("give exactly one of a model preset or a graph (a file, or its JSON)", "`loom models` lists the presets");
  if (!request.model.empty())
    return with_context(models::build_model(request.model, request.model_options), "model");
  if (!request.graph_file.empty()) return frontend::load_graph_file(request.graph_file, catalog);
  return frontend::load_graph_text(request.graph_text, "the graph JSON", catalog);
}

namespace {

// Whether to fold (api/plan_job.h): on request, or automatically for a large megatron plan.
Expected<bool> decide_fold(const PlanRequest& request, const ir::Graph& forward) {
  const policy::ParallelConfig& c = request.config;
  // Folding rebuilds the model at micro-batch size, which only a preset can do: a graph file's sizes
  // are fixed where it was traced.
  const bool foldable = request.policy == "megatron" && c.zero == 0 && !plans_a_graph(request);
  if (request.fold == Fold::off) return false;
  if (request.fold == Fold::on) {
    if (!foldable)
      return fail(plans_a_graph(request)
                      ? std::string("folding rebuilds a model preset at micro-batch size; a graph file cannot be folded")
                      : fmt::format("folding plans the megatron policy without ZeRO, not policy {}{}", request.policy,
                                    c.zero > 0 ? fmt::format(" with ZeRO-{}", c.zero) : ""),
                  "use --policy megatron without --zero on a --model preset, or --fold off");
    return true;
  }
  // The training graph has about three ops per forward op (forward, backward, accumulations).
  const std::int64_t estimate = 3 * static_cast<std::int64_t>(forward.ops.size()) * c.dp * c.tp * c.micro_batches;
  if (foldable && (c.dp > 1 || c.micro_batches > 1) && estimate > kFoldAboveSubOps) return true;
  if (estimate > kExplicitSubOpLimit)
    return fail(fmt::format("the explicit plan would hold about {} sub-ops (ops x dp x tp x micro-batches), over Loom's "
                            "limit of {} (minutes and many GB to plan), and policy {}{} cannot be folded",
                            estimate, kExplicitSubOpLimit, request.policy,
                            c.zero > 0 ? fmt::format(" with ZeRO-{}", c.zero) : ""),
                "fold it (--policy megatron without --zero), or plan fewer dp ranks or micro-batches");
  return false;
}

// The slice's degrees: one replica, one micro-batch.
policy::ParallelConfig slice_config(policy::ParallelConfig config) {
  config.dp = 1;
  config.micro_batches = 1;
  return config;
}

// The model at micro-batch size: the global batch over dp x micro-batches.
Expected<ir::Graph> micro_batch_model(const PlanRequest& request, const ir::Graph& whole) {
  const policy::ParallelConfig& c = request.config;
  const std::int64_t parts = std::int64_t{c.dp} * c.micro_batches;
  const std::int64_t batch = whole.inputs.empty() || whole.tensor(whole.inputs.front()).shape.rank() == 0
                                 ? 0
                                 : whole.tensor(whole.inputs.front()).shape[0];
  if (batch <= 0 || batch % parts != 0)
    return fail(fmt::format("the global batch {} does not divide into dp {} x {} micro-batches", batch, c.dp,
                            c.micro_batches),
                "choose --global-batch a multiple of dp x micro-batches");
  models::ModelOptions options = request.model_options;
  options.batch = batch / parts;
  return with_context(models::build_model(request.model, options), "model at micro-batch size");
}

// How the slice unfolds into the job's step: the schedule template of the full micro-batch count.
Expected<exec::FoldShape> fold_shape(const policy::ParallelConfig& c, std::vector<int> op_stage) {
  const plan::Schedule schedule{
      .kind = c.virtual_stages > 1 ? plan::ScheduleKind::interleaved_one_f_one_b : c.schedule,
      .chunks = c.virtual_stages};
  exec::FoldShape shape{.dp = c.dp, .tp = c.tp, .pp = c.pp, .chunks = c.virtual_stages, .micro_batches = c.micro_batches,
                        .sequences = {}, .op_stage = std::move(op_stage)};
  LOOM_ASSIGN_OR_RETURN(shape.sequences, plan::schedule_blocks(schedule, c.pp, c.micro_batches));
  return shape;
}

}  // namespace

std::string describe(const std::string& policy, const policy::ParallelConfig& c) {
  std::string text = fmt::format("{}: dp {} x tp {} x pp {}", policy, c.dp, c.tp, c.pp);
  if (c.micro_batches > 1) text += fmt::format(", {} micro-batches", c.micro_batches);
  if (c.pp > 1) text += fmt::format(", {}", schedule_name(c));
  if (c.virtual_stages > 1) text += fmt::format(" x {} chunks", c.virtual_stages);
  if (c.sequence_parallel) text += ", sequence parallel";
  if (c.zero > 0) text += fmt::format(", ZeRO-{}", c.zero);
  if (c.recompute != policy::Recompute::none) text += fmt::format(", {} recompute", policy::name(c.recompute));
  return text;
}

Expected<std::unique_ptr<PlanResult>> plan_model(const PlanRequest& request) {
  const auto start = Clock::now();
  // The built-in ops, plus a graph file's custom ops (loom.register_op) once load_graph_file adds them.
  ops::CustomCatalog catalog(ops::builtin_ops());
  auto result = std::make_unique<PlanResult>();
  PlanResult& r = *result;
  r.request = request;
  r.description = describe(request.policy, request.config);

  LOOM_ASSIGN_OR_RETURN(r.cluster, with_context(cluster::make_cluster(request.cluster), "cluster"));
  LOOM_RETURN_IF_ERROR(check_devices(request, r.cluster));
  std::optional<cost::ProfileDb> profile;
  if (!request.profile.empty()) {
    LOOM_ASSIGN_OR_RETURN(profile, cost::ProfileDb::load(request.profile));
  }

  auto stage = Clock::now();
  LOOM_ASSIGN_OR_RETURN(ir::Graph forward, load_forward(request, catalog));
  const sim::Workload step_workload = workload_of(forward);
  LOOM_ASSIGN_OR_RETURN(r.folded, decide_fold(request, forward));
  const policy::ParallelConfig config = r.folded ? slice_config(request.config) : request.config;
  if (r.folded) {
    LOOM_ASSIGN_OR_RETURN(forward, micro_batch_model(request, forward));
  }
  LOOM_ASSIGN_OR_RETURN(r.graph, ir::build_training_graph(forward, catalog, request.optimizer));
  LOOM_ASSIGN_OR_RETURN(r.stats, ir::compute_stats(r.graph, catalog));
  r.seconds.build = seconds_since(stage);

  stage = Clock::now();
  LOOM_ASSIGN_OR_RETURN(r.plan, plan::make_plan(r.graph, catalog));
  std::vector<int> op_stage;
  if (r.folded) {
    LOOM_ASSIGN_OR_RETURN(op_stage, policy::megatron_stages(r.plan, request.config));
  }
  LOOM_RETURN_IF_ERROR(with_context(policy::apply_policy(r.plan, request.policy, config, catalog),
                                    fmt::format("policy {}", request.policy)));
  r.seconds.policy = seconds_since(stage);

  stage = Clock::now();
  r.slice_devices = policy::device_count(config);
  exec::MaterializeOptions options;
  options.cluster = r.cluster;
  // A shrunk model's tensors are tiny: price moves by bandwidth alone, as `loom verify` does, so they
  // move as the full-size ones would (latency would make every move a p2p send).
  if (request.model_options.shrink) options.cost_model = exec::bandwidth_only_cost(r.cluster);
  LOOM_ASSIGN_OR_RETURN(exec::Materialized materialized,
                        with_context(exec::materialize(r.plan, r.slice_devices, options), "materializing the plan"));
  r.exec = std::move(materialized.exec);
  r.exec.plan = &r.plan;
  r.materialize_stats = std::move(materialized.stats);
  LOOM_RETURN_IF_ERROR(with_context(exec::check_exec_plan(r.exec), "checking the ExecPlan"));
  r.passes = exec::run_exec_passes(r.exec);
  LOOM_RETURN_IF_ERROR(with_context(exec::check_exec_plan(r.exec), "checking the ExecPlan after the exec passes"));
  exec::assign_device_classes(r.exec);
  if (r.folded) {
    LOOM_ASSIGN_OR_RETURN(exec::FoldShape shape, fold_shape(request.config, std::move(op_stage)));
    r.slice = std::move(r.exec);
    r.exec = exec::ExecPlan{};
    LOOM_ASSIGN_OR_RETURN(r.step, with_context(exec::unfold_step(r.slice, std::move(shape)), "unfolding the step"));
    r.step.step.plan = &r.plan;
    const exec::ExecPassStats step_passes = exec::run_exec_passes(r.step);
    r.passes.buckets += step_passes.buckets;
    r.passes.bucketed_reductions += step_passes.bucketed_reductions;
  }
  r.seconds.materialize = seconds_since(stage);

  stage = Clock::now();
  const exec::ExecPlan& step = r.folded ? r.step.step : r.exec;
  LOOM_ASSIGN_OR_RETURN(cost::ComputeModel compute,
                        cost::ComputeModel::make(r.plan, catalog, r.cluster.gpu, profile ? &*profile : nullptr));
  LOOM_ASSIGN_OR_RETURN(sim::Durations durations, sim::model_durations(step, compute, r.cluster));
  LOOM_ASSIGN_OR_RETURN(r.sim, with_context(r.folded ? sim::simulate(r.step, durations) : sim::simulate(r.exec, durations),
                                            "simulating the plan"));
  r.memory = r.folded ? cost::memory_usage(r.step) : cost::memory_usage(r.exec);
  sim::Workload workload = step_workload;
  workload.graph_copies = r.folded ? static_cast<double>(request.config.dp) * request.config.micro_batches : 1;
  LOOM_ASSIGN_OR_RETURN(r.metrics, sim::step_metrics(step, r.sim, r.memory, r.cluster.gpu, catalog, workload));
  r.seconds.simulate = seconds_since(stage);
  r.seconds.total = seconds_since(start);
  return result;
}

Expected<std::vector<std::string>> write_plan_files(const PlanResult& r, const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return fail(fmt::format("cannot create output directory '{}': {}", dir, ec.message()));
  const sim::ReportLabels labels{.model = r.request.model.empty() ? r.graph.name : r.request.model,
                                 .cluster = r.cluster.name,
                                 .policy = r.description};
  const std::vector<std::pair<std::string, std::string>> files = {
      {"plan.json", plan::plan_to_json(r.plan)},
      {"exec.json", r.folded ? exec::exec_to_json(r.slice, &r.step.shape) : exec::exec_to_json(r.exec)},
      {"trace.json", r.folded ? sim::chrome_trace_json(r.step, r.sim) : sim::chrome_trace_json(r.exec, r.sim)},
      {"report.html", r.folded ? sim::html_report(labels, r.step, r.sim, r.metrics, r.memory)
                               : sim::html_report(labels, r.exec, r.sim, r.metrics, r.memory)},
  };
  std::vector<std::string> paths;
  for (const auto& [name, text] : files) {
    const std::string path = (std::filesystem::path(dir) / name).string();
    LOOM_RETURN_IF_ERROR(write_file_atomically(path, text, name));
    paths.push_back(path);
  }
  return paths;
}

}  // namespace loom::api
