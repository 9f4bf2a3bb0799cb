// load_job (job.h): the cluster, the profile database, the model, the options resolved once, the fold
// decided, and the training graph.
#include <chrono>

#include <fmt/format.h>

#include "loom/api/baseline_search.h"
#include "loom/api/job.h"
#include "loom/cluster/presets.h"
#include "loom/core/strings.h"
#include "loom/frontend/graph_file.h"
#include "loom/frontend/onnx_file.h"
#include "loom/ir/autograd.h"
#include "loom/ir/graph_stats.h"
#include "loom/models/zoo.h"
#include "loom/policy/plan_size.h"
#include "loom/policy/policy.h"
#include "stage_clock.h"

namespace loom::api {
namespace {

// The model at the options' sizes (a preset, a model file, --arch), or the traced graph.
Expected<ir::Graph> load_forward(const JobOptions& o, ops::CustomCatalog& catalog) {
  if (!plans_a_graph(o)) return with_context(build_model_of(o), "model");
  if (frontend::is_onnx_path(o.graph_file)) {
    LOOM_ASSIGN_OR_RETURN(const frontend::OnnxOptions onnx,
                          with_context(frontend::parse_onnx_dims(o.onnx_dims), "option --onnx-dim"));
    return frontend::load_onnx_file(o.graph_file, catalog, onnx);
  }
  if (!o.graph_file.empty()) return frontend::load_graph_file(o.graph_file, catalog, o.global_batch);
  return frontend::load_graph_text(o.graph_text, "the graph JSON", catalog, o.global_batch);
}

// The samples and tokens one step processes: the batch of the graph's first input, times its second
// dimension for token models (an integer input: token ids).
sim::Workload workload_of(const ir::Graph& graph) {
  sim::Workload w;
  w.samples_per_step = static_cast<double>(ir::batch_of(graph));
  if (graph.inputs.empty()) return w;
  const ir::FullTensor& first = graph.tensor(graph.inputs.front());
  if (!ir::is_floating(first.dtype) && first.shape.rank() >= 2)
    w.tokens_per_step = static_cast<double>(first.shape[0] * first.shape[1]);
  return w;
}

std::string zero_text(int zero) { return zero > 0 ? fmt::format(" with ZeRO-{}", zero) : std::string(); }

using policy::explicit_plan_bytes;
using policy::explicit_sub_ops;
const double kExplicitPlanBytesLimit = policy::explicit_plan_bytes_limit();

// What brings an explicit plan under the memory limit: folding, where the policy folds; else the most
// micro-batches that fit.
std::string smaller_plan_hint(std::int64_t forward_ops, const policy::ParallelConfig& c, bool foldable) {
  if (foldable) return "drop --fold off: --fold auto plans it folded (one micro-batch of one replica, repeated)";
  int fits = c.micro_batches;
  while (fits > 1 && explicit_plan_bytes(forward_ops, c, fits) > kExplicitPlanBytesLimit) --fits;
  const std::string fewer =
      fits < c.micro_batches && explicit_plan_bytes(forward_ops, c, fits) <= kExplicitPlanBytesLimit
          ? fmt::format("--microbatches {} or fewer, or ", fits)
          : std::string();
  return fmt::format("plan {}fewer GPUs (--gpus, --dp), or fold it (--policy megatron without --zero or a zero-bubble "
                     "--schedule)",
                     fewer);
}

// Whether to fold (job.h): on request, or automatically for a large megatron plan.
Expected<bool> decide_fold(const Job& job, const ir::Graph& forward) {
  const JobOptions& o = job.options;
  const policy::ParallelConfig& c = job.request.config;
  // Folding rebuilds the model at micro-batch size, which only a preset can do: a graph file's sizes
  // are fixed where it was traced.
  // The fold replays forward and backward segments; a zero-bubble schedule's W blocks have none yet.
  // 3F1B's chunks are the model's passes, which the fold's slice does not know: planned explicitly.
  // Per-layer degrees (layer_tp) are planned explicitly: the fold's slice is built at one tp.
  // ZeRO folds where policy::zero_folds says, without offload's host steps.
  const bool foldable = (o.policy == "megatron" || o.policy == "zero") &&
                        (c.zero == 0 || (o.offload == exec::Offload::none && policy::zero_folds(c, job.cluster.gpus_per_node))) &&
                        !plans_a_graph(o) && !plan::splits_backward(c.schedule) &&
                        c.schedule != plan::ScheduleKind::three_f_one_b && c.layer_tp.empty();
  if (o.fold == Fold::on) {
    if (!foldable)
      return fail(plans_a_graph(o)
                      ? std::string("folding rebuilds a model preset at micro-batch size; a graph file cannot be folded")
                      : fmt::format("folding plans the megatron and zero policies (ZeRO-2 and -3 within one node, not "
                                    "ZeRO-1 with tp > 1, without ZeRO-Offload) without a zero-bubble schedule or 3f1b, not policy {}{} with schedule {}",
                                    o.policy, zero_text(c.zero), plan::name(c.schedule)),
                  "use --policy megatron or zero without --offload, a zero-bubble schedule or 3f1b on a --model preset, "
                  "or --fold off");
    return true;
  }
  const auto forward_ops = static_cast<std::int64_t>(forward.ops.size());
  const double estimate = explicit_sub_ops(forward_ops, c, c.micro_batches);
  const double bytes = explicit_plan_bytes(forward_ops, c, c.micro_batches);
  // A ZeRO slice keeps the replicas: folding helps only where one micro-batch of them fits the limit.
  const bool slice_fits = c.zero == 0 || explicit_plan_bytes(forward_ops, c, 1) <= kExplicitPlanBytesLimit;
  // Refused before planning, also under --fold off (175B on 1024 GPUs unfolded climbed past 13 GB).
  if (bytes > kExplicitPlanBytesLimit && !(o.fold == Fold::automatic && foldable && slice_fits))
    return fail(fmt::format("the explicit plan would hold about {:.0f} sub-ops (ops x dp x tp x micro-batches) and take "
                            "about {} to plan, over Loom's limit of {}; policy {}{}{} {}",
                            estimate, human_bytes(bytes), human_bytes(kExplicitPlanBytesLimit), o.policy,
                            zero_text(c.zero),
                            plan::splits_backward(c.schedule) ? fmt::format(" with schedule {}", plan::name(c.schedule))
                                                              : std::string(),
                            foldable && slice_fits ? "is planned unfolded (--fold off)" : "cannot be folded"),
                smaller_plan_hint(forward_ops, c, foldable && slice_fits));
  if (o.fold == Fold::off) return false;
  return foldable && ((c.zero == 0 && c.dp > 1) || c.micro_batches > 1) && estimate > static_cast<double>(kFoldAboveSubOps);
}

// A zero-bubble schedule orders the backward's weight parts apart: the graph's backward ops are split.
Expected<void> split_for_schedule(Job& job) {
  if (!plan::splits_backward(job.request.config.schedule)) return {};
  LOOM_ASSIGN_OR_RETURN(job.graph, ir::split_weight_gradients(job.graph));
  return {};
}

// The model at micro-batch size: the global batch over dp x micro-batches (a slice that keeps the
// replicas: over the micro-batches).
Expected<ir::Graph> micro_batch_model(const Job& job, std::int64_t global_batch) {
  const policy::ParallelConfig& c = job.request.config;
  const std::int64_t parts = std::int64_t{job.slice_keeps_replicas ? 1 : c.dp} * c.micro_batches;
  if (global_batch <= 0 || global_batch % parts != 0)
    return fail(fmt::format("the global batch {} does not divide into dp {} x {} micro-batches", global_batch, c.dp,
                            c.micro_batches),
                "choose --global-batch a multiple of dp x micro-batches");
  models::ModelOptions options = job.request.model_options;
  options.batch = global_batch / parts;
  LOOM_ASSIGN_OR_RETURN(const models::ModelPreset preset, model_preset_of(job.options));
  return with_context(models::build_model(preset, options), "model at micro-batch size");
}

// The cluster the layout search prices moves on: --layout-cluster, else the job's cluster.
Expected<cluster::Cluster> layout_cluster_of(const JobOptions& options, const cluster::Cluster& cluster) {
  if (options.layout_cluster.empty()) return cluster;
  return with_context(cluster::make_cluster(options.layout_cluster), "option --layout-cluster");
}

}  // namespace

Expected<std::unique_ptr<Job>> load_job(const JobOptions& options) {
  const StageClock clock;
  LOOM_RETURN_IF_ERROR(check_options(options));
  auto job = std::make_unique<Job>();
  Job& j = *job;
  j.options = options;
  LOOM_ASSIGN_OR_RETURN(j.cluster, with_context(cluster::make_cluster(options.cluster), "cluster"));
  LOOM_ASSIGN_OR_RETURN(j.layout_cluster, layout_cluster_of(options, j.cluster));
  if (!options.profile.empty()) {
    LOOM_ASSIGN_OR_RETURN(j.profile, cost::ProfileDb::load(options.profile));
  }
  // The sizes a preset is built at do not depend on the degrees, so the model comes first and its
  // global batch resolves the micro-batches.
  LOOM_ASSIGN_OR_RETURN(ir::Graph forward, load_forward(options, j.catalog));
  const std::int64_t global_batch = ir::batch_of(forward);
  LOOM_ASSIGN_OR_RETURN(j.request, resolve_request(options, j.cluster, global_batch));
  if (j.layout_cluster.device_count() < j.request.gpus)
    return fail(fmt::format("--layout-cluster '{}' has {} GPUs, the job needs {}", j.layout_cluster.name,
                            j.layout_cluster.device_count(), j.request.gpus),
                "give a layout cluster with at least the job's GPUs");
  j.workload = workload_of(forward);
  j.description = describe(options.policy, j.request.config);
  if (!is_search(options.policy)) {
    LOOM_ASSIGN_OR_RETURN(j.folded, decide_fold(j, forward));
  }
  if (j.folded) {
    j.slice_keeps_replicas = j.request.config.zero > 0;
    LOOM_ASSIGN_OR_RETURN(forward, micro_batch_model(j, global_batch));
  }
  LOOM_ASSIGN_OR_RETURN(j.graph, ir::build_training_graph(forward, j.catalog, j.request.optimizer));
  LOOM_RETURN_IF_ERROR(split_for_schedule(j));
  LOOM_ASSIGN_OR_RETURN(j.stats, ir::compute_stats(j.graph, j.catalog));
  j.seconds.build = clock.seconds();
  j.stage = Stage::loaded;
  return job;
}

Expected<std::unique_ptr<Job>> load_job(const JobOptions& options, ir::Graph training_graph) {
  const StageClock clock;
  auto job = std::make_unique<Job>();
  Job& j = *job;
  j.options = options;
  j.options.model.clear();
  j.options.model_file.clear();
  j.options.arch = {};
  j.options.graph_file.clear();
  j.options.graph_text.clear();
  j.options.fold = Fold::off;
  LOOM_ASSIGN_OR_RETURN(j.cluster, with_context(cluster::make_cluster(options.cluster), "cluster"));
  LOOM_ASSIGN_OR_RETURN(j.layout_cluster, layout_cluster_of(options, j.cluster));
  LOOM_ASSIGN_OR_RETURN(j.request, resolve_request(j.options, j.cluster, ir::batch_of(training_graph)));
  j.workload = workload_of(training_graph);
  j.description = describe(options.policy, j.request.config);
  j.graph = std::move(training_graph);
  LOOM_RETURN_IF_ERROR(split_for_schedule(j));
  LOOM_ASSIGN_OR_RETURN(j.stats, ir::compute_stats(j.graph, j.catalog));
  j.seconds.build = clock.seconds();
  j.stage = Stage::loaded;
  return job;
}

}  // namespace loom::api
