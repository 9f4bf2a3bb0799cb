// `loom plan`: plans a model preset (or a traced graph file, --graph) on a cluster with a built-in policy, materializes, checks and
// simulates it, prints the summary and writes plan.json, exec.json, trace.json and report.html.
// `loom compare`: the same for several policies, ranked by step time.
#include <fmt/format.h>

#include "commands.h"
#include "loom/api/baseline_search.h"
#include "loom/api/emit_programs.h"
#include "loom/api/plan_job.h"
#include "loom/core/strings.h"
#include "model_options.h"
#include "optimizer_options.h"
#include "parallel_options.h"
#include "plan_summary.h"

namespace loom::cli {
namespace {

// What `plan` and `compare` share besides the parallel options.
struct JobArgs {
  ModelArgs model;
  std::string cluster = "dgx-a100";
  std::string profile;
  std::string fold = "auto";
  ParallelArgs parallel;
  OptimizerArgs optimizer;
};

struct PlanArgs {
  JobArgs job;
  std::string policy = "megatron";
  std::string out = "loom-out";
  std::string emit;     // --emit DIR: per-rank PyTorch modules and manifest.json (docs/codegen.md)
  bool shrink = false;  // --shrink: tiny widths, as `loom verify` builds its models
};

struct CompareArgs {
  JobArgs job;
  std::string policies = "dp,tp,megatron";
};

void add_job_options(CLI::App* cmd, JobArgs* args) {
  add_model_options(cmd, &args->model, /*dtype=*/true, /*graph=*/true);
  cmd->add_option("--cluster", args->cluster, "Cluster preset (see `loom clusters`) or a YAML / JSON file")
      ->capture_default_str();
  cmd->add_option("--profile", args->profile, "Profile database overriding the roofline (see `loom profile`)");
  add_parallel_options(cmd, &args->parallel);
  add_optimizer_options(cmd, &args->optimizer);
  cmd->add_option("--fold", args->fold,
                  "Plan one micro-batch of one replica and repeat it (megatron without ZeRO): auto (large jobs), on, off")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->capture_default_str();
}

Expected<api::PlanRequest> request_of(const JobArgs& args, const std::string& policy) {
  LOOM_RETURN_IF_ERROR(check_model_source(args.model));
  api::PlanRequest request;
  request.model = args.model.model;
  request.graph_file = args.model.graph;
  LOOM_ASSIGN_OR_RETURN(request.model_options, model_options(args.model));
  LOOM_ASSIGN_OR_RETURN(request.optimizer, optimizer_options(args.optimizer));
  request.cluster = args.cluster;
  request.gpus = args.parallel.gpus;
  request.policy = policy;
  request.profile = args.profile;
  request.fold = args.fold == "on" ? api::Fold::on : args.fold == "off" ? api::Fold::off : api::Fold::automatic;
  LOOM_ASSIGN_OR_RETURN(request.config, parallel_config(policy, args.parallel));
  return request;
}

constexpr int kOutOfMemory = 3;

// A built-in policy, or a baseline's grid search (printing what it searched).
Expected<std::unique_ptr<api::PlanResult>> plan_or_search(const api::PlanRequest& request) {
  if (!api::is_baseline(request.policy)) return api::plan_model(request);
  LOOM_ASSIGN_OR_RETURN(api::BaselineResult searched, api::best_baseline(request, request.policy));
  fmt::print("search     {}: {} configurations, {} planned ({} not applicable)\n", request.policy, searched.candidates,
             searched.evaluated, searched.failed);
  return std::move(searched.best);
}

int run_plan(const PlanArgs& args) {
  Expected<api::PlanRequest> request = request_of(args.job, args.policy);
  if (!request) return report(request.error());
  request->model_options.shrink = args.shrink;
  Expected<std::unique_ptr<api::PlanResult>> result = plan_or_search(*request);
  if (!result) return report(result.error());
  fmt::print("{}", plan_summary(**result));
  Expected<std::vector<std::string>> files = api::write_plan_files(**result, args.out);
  if (!files) return report(files.error());
  fmt::print("wrote      {}\n", join(*files, ", "));
  if (!args.emit.empty()) {
    Expected<std::vector<std::string>> programs = api::write_rank_programs(**result, args.emit);
    if (!programs) return report(with_context(programs.error(), "option --emit"));
    fmt::print("emitted    {} rank modules and manifest.json in {}\n", programs->size() - 1, args.emit);
  }
  fmt::print("report     {}\n", files->back());
  if ((*result)->metrics.out_of_memory()) {
    fmt::print(stderr, "loom: error: the plan does not fit in GPU memory ({} devices over capacity; see OOM above)\n",
               (*result)->metrics.out_of_memory_devices);
    return kOutOfMemory;
  }
  return 0;
}

int run_compare(const CompareArgs& args) {
  std::vector<std::unique_ptr<api::PlanResult>> results;
  std::vector<const api::PlanResult*> rows;
  for (const std::string& policy : split(args.policies, ',')) {
    Expected<api::PlanRequest> request = request_of(args.job, policy);
    if (!request) return report(with_context(request.error(), fmt::format("policy '{}'", policy)));
    Expected<std::unique_ptr<api::PlanResult>> result = plan_or_search(*request);
    if (!result) return report(with_context(result.error(), fmt::format("policy '{}'", policy)));
    rows.push_back(result->get());
    results.push_back(std::move(*result));
  }
  fmt::print("{} on {}\n{}", args.job.model.graph.empty() ? args.job.model.model : args.job.model.graph, rows.empty() ? args.job.cluster : rows.front()->cluster.name,
             ranked_table(rows));
  return 0;
}

}  // namespace

void add_plan_command(CLI::App& app) {
  auto args = std::make_shared<PlanArgs>();
  CLI::App* cmd = app.add_subcommand("plan", "Plan, simulate and report a model on a cluster under a policy");
  add_job_options(cmd, &args->job);
  cmd->add_option("--policy", args->policy,
                  "Policy: " + policy::known_policy_names() + "; or a baseline's grid search: megatron-best, deepspeed-best")
      ->capture_default_str();
  cmd->add_option("--out", args->out, "Directory for plan.json, exec.json, trace.json, report.html")
      ->capture_default_str();
  cmd->add_option("--emit", args->emit,
                  "Also write per-rank PyTorch modules and manifest.json here (run: python -m loom.runtime.launch DIR)");
  cmd->add_flag("--shrink", args->shrink, "Shrink the preset to tiny widths, as `loom verify` does");
  on_selected(cmd, [args] { return run_plan(*args); });
}

void add_compare_command(CLI::App& app) {
  auto args = std::make_shared<CompareArgs>();
  CLI::App* cmd = app.add_subcommand("compare", "Plan a model under several policies and rank them by step time");
  add_job_options(cmd, &args->job);
  cmd->add_option("--policies", args->policies, "Comma-separated policies")->capture_default_str();
  on_selected(cmd, [args] { return run_compare(*args); });
}

}  // namespace loom::cli
