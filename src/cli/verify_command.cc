// `loom verify`: proves a policy's plan of a model computes what one device computes. Builds the preset
// (shrunk to a few layers and tiny widths unless --full), applies the policy, materializes the plan into
// an ExecPlan, checks it cannot hang, runs it on simulated devices with the float64 reference kernels
// and compares every activation, gradient, updated parameter and the loss with a single-device run; the
// parameters and optimizer states each device ends with must be what its next step loads (step closing).
#include <fmt/format.h>

#include "commands.h"
#include "model_options.h"
#include "parallel_options.h"
#include "loom/cluster/presets.h"
#include "loom/core/strings.h"
#include "loom/exec/check.h"
#include "loom/exec/device_classes.h"
#include "loom/exec/materialize.h"
#include "loom/exec/passes.h"
#include "loom/ir/autograd.h"
#include "loom/ir/graph_stats.h"
#include "loom/models/zoo.h"
#include "loom/ops/registry.h"
#include "loom/policy/policy.h"
#include "loom/policy/zero.h"
#include "loom/verify/closed_step.h"
#include "loom/verify/exec_interpreter.h"
#include "loom/verify/graph_interpreter.h"

namespace loom::cli {
namespace {

struct VerifyArgs {
  ModelArgs model{.dtype = "f32"};  // float64 reference kernels; f32 tensors
  std::string policy = "dp";
  ParallelArgs parallel{.devices_flag = "--devices"};
  bool full = false;
  std::string optimizer = "adamw";
  bool fallback_only = false;
  std::uint64_t seed = 1;
  double tolerance = 1e-9;
};

void print_error_row(std::string_view label, const verify::ErrorStat& e) {
  fmt::print("  {:<12} {:>12.3e} {:>12.3e}  {}\n", label, e.max_abs, e.max_rel, e.worst.empty() ? "-" : e.worst);
}

int run_verify(const VerifyArgs& args) {
  const ops::OpRegistry& catalog = ops::builtin_ops();
  Expected<policy::ParallelConfig> config = parallel_config(args.policy, args.parallel);
  if (!config) return report(config.error());
  const int devices = policy::device_count(*config);

  Expected<models::ModelOptions> options = model_options(args.model);
  if (!options) return report(options.error());
  options->shrink = !args.full;
  Expected<ir::Graph> forward = models::build_model(args.model.model, *options);
  if (!forward) return report(forward.error());
  ir::OptimizerOptions optimizer;
  Expected<ir::OptimizerKind> kind = with_context(ir::parse_optimizer(args.optimizer), "option --optimizer");
  if (!kind) return report(kind.error());
  optimizer.kind = *kind;
  Expected<ir::Graph> graph = ir::build_training_graph(*forward, catalog, optimizer);
  if (!graph) return report(graph.error());
  Expected<ir::GraphStats> stats = ir::compute_stats(*graph, catalog);
  if (!stats) return report(stats.error());

  Expected<plan::Plan> plan = plan::make_plan(*graph, catalog);
  if (!plan) return report(plan.error());
  if (Expected<void> applied = policy::apply_policy(*plan, args.policy, *config); !applied)
    return report(with_context(applied.error(), fmt::format("policy {}", args.policy)));

  exec::MaterializeOptions materialize_options;
  materialize_options.use_layout_search = !args.fallback_only;
  // Shrunk tensors are tiny: price by bandwidth so they move as the full-size ones would.
  Expected<cluster::Cluster> cluster = cluster::make_cluster(devices <= 8 ? std::string("dgx-a100")
                                                                         : fmt::format("dgx-a100x{}", (devices + 7) / 8));
  if (!cluster) return report(cluster.error());
  if (!args.full) materialize_options.cost_model = exec::bandwidth_only_cost(*cluster);
  Expected<exec::Materialized> materialized = exec::materialize(*plan, devices, materialize_options);
  if (!materialized) return report(with_context(materialized.error(), "materializing the plan"));
  exec::ExecPlan& exec = materialized->exec;
  if (Expected<void> checked = exec::check_exec_plan(exec); !checked)
    return report(with_context(checked.error(), "checking the ExecPlan"));
  // The plan that trains (and that `loom plan` prices) is the one after the exec passes: prove that one.
  const exec::ExecPassStats passes = exec::run_exec_passes(exec);
  if (Expected<void> checked = exec::check_exec_plan(exec); !checked)
    return report(with_context(checked.error(), "checking the ExecPlan after the exec passes"));
  exec::assign_device_classes(exec);

  const std::vector<verify::NdArray> initial = verify::initial_values(*graph, args.seed);
  Expected<std::vector<verify::NdArray>> reference = verify::run_graph(*graph, initial);
  if (!reference) return report(with_context(reference.error(), "single-device run"));
  Expected<verify::ExecRun> run = verify::run_exec_plan(exec, initial);
  if (!run) return report(with_context(run.error(), "running the ExecPlan"));
  Expected<verify::RunComparison> cmp = verify::compare_runs(*graph, *reference, run->values);
  if (!cmp) return report(cmp.error());
  Expected<verify::ClosedStep> closed = verify::check_closed_step(exec, *run, *reference);
  if (!closed) return report(with_context(closed.error(), "closing the step"));

  const exec::MaterializeStats& m = materialized->stats;
  std::vector<std::string> collectives;
  for (const auto& [name, count] : m.collectives) collectives.push_back(fmt::format("{} {}", name, count));
  std::size_t instructions = 0;
  for (const auto& program : exec.programs) instructions += program.size();
  fmt::print("model      {} ({}): {} ops, {} parameters\n", args.model.model, args.full ? "full size" : "shrunk",
             graph->ops.size(), stats->parameter_count);
  fmt::print("policy     {}: dp {} x tp {} x pp {}, {} micro-batch{}{} on {} devices\n", args.policy, config->dp,
             config->tp, config->pp, config->micro_batches, config->micro_batches == 1 ? "" : "es",
             config->pp == 1             ? ""
             : config->virtual_stages > 1 ? fmt::format(" (interleaved 1f1b, {} chunks per device)", config->virtual_stages)
                                          : fmt::format(" ({})", args.parallel.schedule),
             devices);
  if (config->sequence_parallel) fmt::print("           sequence parallel over the tp ranks\n");
  if (config->zero > 0) fmt::print("           ZeRO stage {} over the dp ranks\n", config->zero);
  for (const std::string& note : policy::zero_notes(*plan, *config)) fmt::print("note       ZeRO: {}\n", note);
  fmt::print("plan       {} sub-ops\n", plan->live_sub_ops().size());
  fmt::print("exec       {} instructions in {} device class{}; collectives: {}; {} sends; {} autograd pairs\n",
             instructions, exec.representatives.size(), exec.representatives.size() == 1 ? "" : "es",
             collectives.empty() ? "none" : join(collectives, ", "), m.sends, m.autograd_pairs);
  fmt::print("passes     {} exchanges made all-reduces; {} gradient all-reduces in {} buckets\n", passes.exchanges,
             passes.bucketed_reductions, passes.buckets);
  fmt::print("error vs one device (float64):\n  {:<12} {:>12} {:>12}  {}\n", "class", "max abs", "max rel", "worst tensor");
  print_error_row("activations", cmp->activation);
  print_error_row("gradients", cmp->gradient);
  print_error_row("updated", cmp->updated);
  print_error_row("loss", cmp->loss);
  print_error_row("closed", closed->error);
  fmt::print("closed     {} loaded pieces of parameters and optimizer states end the step where the next one loads "
             "them\n",
             closed->pieces);
  const double worst = std::max(cmp->overall.max_rel, closed->error.max_rel);
  const bool pass = worst <= args.tolerance;
  fmt::print("result     {} (max rel {:.3e} {} {:.0e})\n", pass ? "PASS" : "FAIL", worst, pass ? "<=" : ">",
             args.tolerance);
  return pass ? 0 : 1;
}

}  // namespace

void add_verify_command(CLI::App& app) {
  auto args = std::make_shared<VerifyArgs>();
  CLI::App* cmd = app.add_subcommand(
      "verify", "Prove a policy's plan trains exactly as one device: materialize, run on simulated devices, compare");
  add_model_options(cmd, &args->model, /*dtype=*/false);
  cmd->add_option("--policy", args->policy, "Policy: " + policy::known_policy_names())->capture_default_str();
  add_parallel_options(cmd, &args->parallel);
  cmd->add_flag("--full", args->full, "Keep the preset's full size (slow: float64 on this CPU)");
  cmd->add_option("--optimizer", args->optimizer, "sgd, adam or adamw")->capture_default_str();
  cmd->add_flag("--fallback-only", args->fallback_only, "Move data with sends only (no layout search)");
  cmd->add_option("--seed", args->seed, "Seed of the initial values")->capture_default_str();
  cmd->add_option("--tolerance", args->tolerance, "Largest relative error accepted")->capture_default_str();
  on_selected(cmd, [args] { return run_verify(*args); });
}

}  // namespace loom::cli
