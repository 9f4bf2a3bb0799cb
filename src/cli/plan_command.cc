// `loom plan`: plans a model preset (or a traced graph file, --graph) on a cluster with a built-in policy
// or a baseline's search (api::plan_or_search), prints the summary (or, with --json, its JSON) and writes
// plan.json, exec.json, trace.json and report.html.
// `loom compare`: the same for several policies, ranked by step time; a policy that does not apply to the
// model gets an "n/a" row with the reason instead of stopping the table.
#include <fmt/format.h>

#include "commands.h"
#include "job_flags.h"
#include "loom/api/baseline_search.h"
#include "loom/api/emit_programs.h"
#include "loom/api/job.h"
#include "loom/api/memory_advice.h"
#include "loom/core/strings.h"
#include "plan_summary.h"

namespace loom::cli {
namespace {

constexpr auto kJobGroups = {api::OptionGroup::model, api::OptionGroup::sizes, api::OptionGroup::optimizer,
                             api::OptionGroup::cluster, api::OptionGroup::parallel, api::OptionGroup::fold,
                             api::OptionGroup::passes};
// `loom plan` writes the report files, which the report group shapes.
constexpr auto kPlanGroups = {api::OptionGroup::model, api::OptionGroup::sizes, api::OptionGroup::optimizer,
                              api::OptionGroup::cluster, api::OptionGroup::parallel, api::OptionGroup::fold,
                              api::OptionGroup::passes, api::OptionGroup::report};

struct PlanArgs {
  JobFlags job;
  std::string out = "loom-out";
  std::string emit;  // --emit DIR: per-rank PyTorch modules and manifest.json (docs/codegen.md)
  bool json = false;
  bool explain = false;  // --explain: a search's finalists and why the winner wins
};

struct CompareArgs {
  JobFlags job;
  std::string policies = "dp,tp,megatron";
  bool json = false;
};

constexpr int kOutOfMemory = 3;

int run_plan(const PlanArgs& args) {
  Expected<api::JobOptions> options = job_options(args.job);
  if (!options) return report(options.error(), kUsageError);
  std::optional<api::SearchSummary> search;
  Expected<std::unique_ptr<api::Job>> planned = api::plan_or_search(*options, &search, !args.json);
  if (!planned) return report(planned.error());
  const api::Job& job = **planned;
  if (!args.json) {
    if (search) fmt::print("{}", search_summary(*search, args.explain));
    fmt::print("{}", plan_summary(job));
  }
  // The reports and the rank programs are one set: a failure (a folded plan for --emit, a full disk) leaves
  // every previous file as it was.
  OutputSet set;
  if (Expected<void> added = api::add_plan_files(job, args.out, set); !added) return report(added.error());
  if (!args.emit.empty())
    if (Expected<void> added = api::add_rank_programs(job, args.emit, set); !added)
      return report(with_context(added.error(), "option --emit"));
  Expected<std::vector<std::string>> written = set.commit();
  if (!written) return report(written.error());
  constexpr std::size_t kPlanFiles = 4;
  const std::vector<std::string> files(written->begin(), written->begin() + kPlanFiles);
  const std::vector<std::string> programs(written->begin() + kPlanFiles, written->end());
  if (args.json) {
    nlohmann::ordered_json out = plan_json(job, search);
    out["files"] = files;
    if (!programs.empty()) out["emitted"] = programs;
    fmt::print("{}\n", out.dump(2));
  } else {
    fmt::print("wrote      {}\n", join(files, ", "));
    if (!programs.empty())
      fmt::print("emitted    {} rank modules and manifest.json in {}\n", programs.size() - 1, args.emit);
    fmt::print("report     {}\n", files.back());
  }
  if (job.metrics.out_of_memory())
    return report(Error{fmt::format("the plan does not fit in GPU memory ({} devices over capacity{})",
                                    job.metrics.out_of_memory_devices, args.json ? "" : "; see OOM above"),
                        api::memory_advice(job)},
                  kOutOfMemory);
  return 0;
}

int run_compare(const CompareArgs& args) {
  Expected<api::JobOptions> base = job_options(args.job);
  if (!base) return report(base.error(), kUsageError);
  std::vector<std::unique_ptr<api::Job>> jobs;
  std::vector<const api::Job*> rows;
  std::vector<std::pair<std::string, std::string>> not_applicable;  // policy, reason
  nlohmann::ordered_json json_rows = nlohmann::ordered_json::array();
  for (const std::string& policy : split(args.policies, ',')) {
    api::JobOptions options = *base;
    options.policy = policy;
    // A bad option or an unknown policy stops the command; a policy that cannot plan this model is a row.
    if (Expected<void> valid = api::check_options(options); !valid)
      return report(with_context(valid.error(), fmt::format("policy '{}'", policy)));
    std::optional<api::SearchSummary> search;
    Expected<std::unique_ptr<api::Job>> planned = api::plan_or_search(options, &search);
    if (!planned) {
      not_applicable.emplace_back(policy, planned.error().to_string());
      json_rows.push_back({{"policy", policy},
                           {"error", {{"message", planned.error().message}, {"hint", planned.error().hint}}}});
      continue;
    }
    nlohmann::ordered_json row = {{"policy", policy}};
    const nlohmann::ordered_json document = plan_json(**planned, search);
    for (const auto& [key, value] : document.items())
      if (key != "schema") row[key] = value;
    json_rows.push_back(std::move(row));
    rows.push_back(planned->get());
    jobs.push_back(std::move(*planned));
  }
  if (args.json) {
    fmt::print("{}\n", nlohmann::ordered_json{{"schema", "loom.compare/1"}, {"rows", std::move(json_rows)}}.dump(2));
    return 0;
  }
  const api::JobOptions& o = *base;
  fmt::print("{} on {}\n{}", api::model_label(o),
             rows.empty() ? o.cluster : rows.front()->cluster.name, ranked_table(rows));
  for (const auto& [policy, reason] : not_applicable) fmt::print("{:>4}  {:<52} n/a: {}\n", "-", policy, reason);
  return 0;
}

}  // namespace

void add_plan_command(CLI::App& app) {
  auto args = std::make_shared<PlanArgs>();
  CLI::App* cmd = app.add_subcommand("plan", "Plan, simulate and report a model on a cluster under a policy");
  add_job_flags(cmd, &args->job, kPlanGroups);
  cmd->add_option("--out", args->out, "Directory for plan.json, exec.json, trace.json, report.html")
      ->capture_default_str();
  cmd->add_option("--emit", args->emit,
                  "Also write per-rank PyTorch modules and manifest.json here (run: python -m loom.runtime.launch DIR)");
  cmd->add_flag("--json", args->json, "Print the summary as JSON (docs/json.md) instead of text");
  cmd->add_flag("--explain", args->explain,
                "With a search (--policy auto, megatron-best, deepspeed-best): print the finalists (analytic and full "
                "step time, memory) and why the winner wins");
  on_selected(cmd, [args] { return run_plan(*args); });
}

void add_compare_command(CLI::App& app) {
  auto args = std::make_shared<CompareArgs>();
  CLI::App* cmd = app.add_subcommand("compare", "Plan a model under several policies and rank them by step time");
  add_job_flags(cmd, &args->job, kJobGroups, {"policy"});
  cmd->add_option("--policies", args->policies, "Comma-separated policies")->capture_default_str();
  cmd->add_flag("--json", args->json, "Print the rows as JSON (docs/json.md) instead of a table");
  on_selected(cmd, [args] { return run_compare(*args); });
}

}  // namespace loom::cli
