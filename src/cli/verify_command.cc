// `loom verify`: proves a policy's plan of a model computes what one device computes. Builds the preset
// (shrunk to a few layers and tiny widths unless --full), applies the policy, materializes the plan into
// an ExecPlan, checks it cannot hang, runs it on simulated devices with the float64 reference kernels
// and compares every activation, gradient, updated parameter and the loss with a single-device run; the
// parameters and optimizer states each device ends with must be what its next step loads (step closing).
#include <fmt/format.h>

#include "commands.h"
#include "job_flags.h"
#include "loom/api/job.h"
#include "loom/api/verify_job.h"
#include "loom/core/strings.h"
#include "loom/policy/zero.h"
#include "plan_summary.h"

namespace loom::cli {
namespace {

struct VerifyArgs {
  JobFlags job;
  bool full = false;
  bool fallback_only = false;
  std::uint64_t seed = 1;
  double tolerance = 1e-9;
};

// verify's own defaults: float64 reference kernels on f32 tensors of the shrunk preset, data parallelism.
api::JobOptions verify_defaults() {
  api::JobOptions o;
  o.dtype = ir::DType::f32;
  o.shrink = true;
  o.policy = "dp";
  return o;
}

void print_error_row(std::string_view label, const verify::ErrorStat& e) {
  fmt::print("  {:<12} {:>12.3e} {:>12.3e}  {}\n", label, e.max_abs, e.max_rel, e.worst.empty() ? "-" : e.worst);
}

// What was proven: the job, its plan and ExecPlan, the exec passes, and the errors against one device.
void print_report(const VerifyArgs& args, const api::Job& job, const api::VerifyReport& proof) {
  const api::JobOptions& options = job.options;
  const policy::ParallelConfig& config = job.request.config;
  const exec::ExecPlan& exec = job.exec;
  const exec::MaterializeStats& m = job.materialize_stats;
  std::vector<std::string> collectives;
  for (const auto& [name, count] : m.collectives) collectives.push_back(fmt::format("{} {}", name, count));
  std::size_t instructions = 0;
  for (const auto& program : exec.programs) instructions += program.size();
  fmt::print("model      {} ({}{}): {} ops, {} parameters\n", api::model_label(options),
             args.full ? "full size" : "shrunk",
             options.attention == models::AttentionImpl::fused
                 ? std::string()
                 : fmt::format(", {} attention", models::name(options.attention)),
             job.graph.ops.size(),
             job.stats.parameter_count);
  fmt::print("policy     {}: dp {} x tp {} x pp {}, {} micro-batch{}{} on {} devices\n", options.policy, config.dp,
             config.tp, config.pp, config.micro_batches, config.micro_batches == 1 ? "" : "es",
             config.pp == 1             ? ""
             : config.virtual_stages > 1 && !plan::v_shaped(config.schedule)
                 ? fmt::format(" (interleaved 1f1b, {} chunks per device)", config.virtual_stages)
                                         : fmt::format(" ({})", plan::name(config.schedule)),
             job.request.gpus);
  if (config.block_order != plan::BlockOrder::strict)
    fmt::print("           {} block order (a block's sub-ops not waiting for its first may start in the block before)\n",
               plan::name(config.block_order));
  if (config.sequence_parallel) fmt::print("           sequence parallel over the tp ranks\n");
  if (config.zero > 0) fmt::print("           ZeRO stage {} over the dp ranks\n", config.zero);
  if (const policy::CoshardConfig c = policy::applied_coshard(job.plan, options.policy, config.coshard); c.parts > 1) {
    const auto regions = policy::coshard_plan(job.plan, c, config.tp);
    fmt::print("           coshard {} parts per tp rank on layers {} ({}): {} regions, run one after another and "
               "recomputed\n",
               c.parts, policy::to_string(c.layers.value_or(policy::LayerRange{})), policy::to_string(c.ops),
               regions ? std::to_string(regions->regions.size()) : "?");
  }
  for (const std::string& note : policy::zero_notes(job.plan, config)) fmt::print("note       ZeRO: {}\n", note);
  fmt::print("plan       {} sub-ops\n", job.plan.live_sub_ops().size());
  fmt::print("exec       {} instructions in {} device class{}; collectives: {}; {} sends; {} autograd pairs\n",
             instructions, exec.representatives.size(), exec.representatives.size() == 1 ? "" : "es",
             collectives.empty() ? "none" : join(collectives, ", "), m.sends, m.autograd_pairs);
  fmt::print("{}", passes_line(job.passes));
  fmt::print("error vs one device (float64):\n  {:<12} {:>12} {:>12}  {}\n", "class", "max abs", "max rel", "worst tensor");
  print_error_row("activations", proof.comparison.activation);
  print_error_row("gradients", proof.comparison.gradient);
  print_error_row("updated", proof.comparison.updated);
  print_error_row("loss", proof.comparison.loss);
  print_error_row("closed", proof.closed.error);
  fmt::print("closed     {} loaded pieces of parameters and optimizer states end the step where the next one loads "
             "them\n",
             proof.closed.pieces);
}

int run_verify(const VerifyArgs& args) {
  Expected<api::JobOptions> options = job_options(args.job);
  if (!options) return report(options.error(), kUsageError);
  options->shrink = !args.full;
  options->layout_search = !args.fallback_only;
  options->fold = api::Fold::off;
  api::size_to_degrees(*options, given(args.job, "gpus"));
  Expected<std::unique_ptr<api::Job>> loaded = api::load_job(*options);
  if (!loaded) return report(loaded.error());
  api::Job& job = **loaded;
  if (Expected<void> applied = api::apply_policy(job); !applied) return report(applied.error());
  if (Expected<void> made = api::materialize(job); !made) return report(made.error());
  Expected<api::VerifyReport> proof = api::verify_job(job, args.seed);
  if (!proof) return report(proof.error());
  print_report(args, job, *proof);
  const double worst = proof->worst();
  const bool pass = worst <= args.tolerance;
  fmt::print("result     {} (max rel {:.3e} {} {:.0e})\n", pass ? "PASS" : "FAIL", worst, pass ? "<=" : ">",
             args.tolerance);
  return pass ? 0 : 1;
}

}  // namespace

void add_verify_command(CLI::App& app) {
  auto args = std::make_shared<VerifyArgs>();
  args->job.defaults = verify_defaults();
  CLI::App* cmd = app.add_subcommand(
      "verify", "Prove a policy's plan trains exactly as one device: materialize, run on simulated devices, compare");
  add_job_flags(cmd, &args->job,
                {api::OptionGroup::model, api::OptionGroup::sizes, api::OptionGroup::optimizer, api::OptionGroup::cluster,
                 api::OptionGroup::parallel, api::OptionGroup::passes},
                {"shrink", "cluster", "profile", "constraints"});
  cmd->add_flag("--full", args->full, "Keep the preset's full size (slow: float64 on this CPU)");
  cmd->add_flag("--fallback-only", args->fallback_only, "Move data with sends only (no layout search)");
  cmd->add_option("--seed", args->seed, "Seed of the initial values")->capture_default_str();
  cmd->add_option("--tolerance", args->tolerance, "Largest relative error accepted")->capture_default_str();
  on_selected(cmd, [args] { return run_verify(*args); });
}

}  // namespace loom::cli
