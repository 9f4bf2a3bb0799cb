// `loom solve-iopddl FILE`: solves an IOPDDL contest instance (docs/search.md) with the sharding
// solver and prints the chosen strategies' cost, the peak usage against the limit and the time; `--out`
// writes the solution (the list of strategy indices), `--json` prints a JSON summary.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "loom/search/iopddl_file.h"
#include "loom/search/sharding_solver.h"

namespace loom::cli {
namespace {

struct SolveIopddlArgs {
  std::string file;
  double timeout = 10;
  std::int64_t iterations = 0;
  std::uint64_t seed = 1;
  std::string out;
  bool json = false;
};

// Instances this small print their strategies; larger ones only through --out or --json.
constexpr std::size_t kPrintedStrategies = 64;

const char* end_name(search::SolveStage::End end) {
  switch (end) {
    case search::SolveStage::End::kDone: return "done";
    case search::SolveStage::End::kDeadline: return "deadline";
    case search::SolveStage::End::kSkipped: return "skipped";
  }
  return "done";
}

// Each stage's end (seconds from the command's start), when not simply done how it ended, and the cost
// of its choice when it has one.
std::string stages_text(const std::vector<search::SolveStage>& stages) {
  std::vector<std::string> parts;
  for (const search::SolveStage& stage : stages) {
    std::string part = fmt::format("{} {:.2f} s", stage.name, stage.ended);
    if (stage.end != search::SolveStage::End::kDone) part += fmt::format(" ({})", end_name(stage.end));
    if (stage.cost) part += fmt::format(" = {}", *stage.cost);
    parts.push_back(std::move(part));
  }
  return fmt::format("{}", fmt::join(parts, ", "));
}

nlohmann::ordered_json stages_json(const std::vector<search::SolveStage>& stages) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const search::SolveStage& stage : stages)
    out.push_back({{"name", stage.name},
                   {"allowed", stage.allowed},
                   {"ended", stage.ended},
                   {"end", end_name(stage.end)},
                   {"cost", stage.cost ? nlohmann::ordered_json(*stage.cost) : nullptr}});
  return out;
}

int run_solve_iopddl(const SolveIopddlArgs& args) {
  const auto started = std::chrono::steady_clock::now();
  auto problem = search::read_iopddl(args.file);
  if (!problem) return report(problem.error());
  search::ProgressLine progress = search::ProgressLine::for_stderr(!args.json);
  search::SolveOptions options;
  options.timeout_seconds = args.iterations > 0 ? 0 : args.timeout;
  options.started = started;  // the timeout holds for the whole command, reading the instance included
  options.iterations = args.iterations;
  options.seed = args.seed;
  options.progress = &progress;
  auto result = search::solve_sharding(*problem, options);
  if (!result) return report(result.error());
  if (!args.out.empty())
    if (auto written = search::write_iopddl_solution(args.out, result->choice); !written) return report(written.error());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  const bool limited = problem->usage_limit != search::kForbidden;
  if (args.json) {
    nlohmann::ordered_json out = {{"problem", problem->name},
                                  {"file", args.file},
                                  {"nodes", problem->nodes.size()},
                                  {"edges", problem->edges.size()},
                                  {"cost", result->cost.total},
                                  {"peak_usage", result->cost.peak_usage},
                                  {"usage_limit", limited ? nlohmann::ordered_json(problem->usage_limit) : nullptr},
                                  {"seconds", seconds},
                                  {"method", result->method},
                                  {"proven_optimal", result->proven_optimal},
                                  {"iterations", result->iterations},
                                  {"free_nodes", result->free_nodes},
                                  {"stages", stages_json(result->stages)},
                                  {"strategies", result->choice.strategies}};
    fmt::print("{}\n", out.dump(2));
    return 0;
  }
  fmt::print("problem {}: {} nodes, {} edges ({} left to choose after presolve)\n",
             problem->name.empty() ? args.file : problem->name, problem->nodes.size(), problem->edges.size(),
             result->free_nodes);
  fmt::print("cost        {}\n", result->cost.total);
  if (limited)
    fmt::print("peak usage  {} of {} ({:.2f} %)\n", result->cost.peak_usage, problem->usage_limit,
               100.0 * static_cast<double>(result->cost.peak_usage) / static_cast<double>(problem->usage_limit));
  else
    fmt::print("peak usage  {} (no limit)\n", result->cost.peak_usage);
  fmt::print("time        {:.2f} s ({}{}, {} tree moves)\n", seconds, result->method,
             result->proven_optimal ? ", proven optimal" : "", result->iterations);
  fmt::print("stages      {}\n", stages_text(result->stages));
  if (result->choice.strategies.size() <= kPrintedStrategies)
    fmt::print("strategies  [{}]\n", fmt::join(result->choice.strategies, ", "));
  if (!args.out.empty()) fmt::print("solution    {}\n", args.out);
  return 0;
}

}  // namespace

void add_solve_iopddl_command(CLI::App& app) {
  auto args = std::make_shared<SolveIopddlArgs>();
  CLI::App* cmd = app.add_subcommand("solve-iopddl", "Solve an IOPDDL contest instance (.json or .json.gz)");
  cmd->add_option("file", args->file, "The instance")->required();
  cmd->add_option("--timeout", args->timeout, "Search time in seconds")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--iterations", args->iterations,
                  "Tree moves per search instead of a timeout (deterministic)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--seed", args->seed, "Seed of the first search (the second uses seed + 1)")->capture_default_str();
  cmd->add_option("--out", args->out, "Write the solution (the strategy indices as a JSON list) to this file");
  cmd->add_flag("--json", args->json, "Print a JSON summary (with the strategies)");
  on_selected(cmd, [args] { return run_solve_iopddl(*args); });
}

}  // namespace loom::cli
