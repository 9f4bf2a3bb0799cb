#include "calibration_runs.h"

#include <cmath>
#include <filesystem>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "loom/core/atomic_file.h"
#include "loom/core/input_file.h"
#include "loom/cost/calibration.h"

namespace loom::cli {

double PlanRun::round_step(std::size_t round) const {
  const std::vector<double>& steps = rounds.at(round);
  if (steps.size() < 2) return steps.empty() ? 0 : steps.front();
  return cost::median(std::vector<double>(steps.begin() + 1, steps.end()));
}

double PlanRun::measured_step() const {
  double fastest = 0;
  for (std::size_t r = 0; r < rounds.size(); ++r)
    if (r == 0 || round_step(r) < fastest) fastest = round_step(r);
  return fastest;
}

namespace {

// One round's step times: positive finite numbers, at least one.
Expected<std::vector<double>> parse_round(const nlohmann::json& round, const std::string& where,
                                          const std::string& hint) {
  if (!round.is_array() || round.empty()) return fail(fmt::format("{} has a round without step times", where), hint);
  std::vector<double> steps;
  for (const nlohmann::json& s : round) {
    if (!s.is_number() || !(s.get<double>() > 0) || !std::isfinite(s.get<double>()))
      return fail(fmt::format("{} has a step time that is not a positive number", where), hint);
    steps.push_back(s.get<double>());
  }
  return steps;
}

}  // namespace

Expected<PlanRuns> parse_plan_runs(const std::string& text, const std::string& source,
                                   const std::vector<std::string>& names) {
  const nlohmann::json doc = nlohmann::json::parse(text, nullptr, false);
  const std::string hint = "write it with `loom calibrate --out DIR` (DIR/measured.json)";
  if (doc.is_discarded() || !doc.is_object() || doc.value("version", 0) != 1 || !doc.contains("runs") ||
      !doc["runs"].is_array())
    return fail(fmt::format("{} is not a plan runs file (version 1 with \"runs\")", source), hint);
  PlanRuns result;
  if (doc.contains("nice") && doc["nice"].is_number_integer()) result.nice = doc["nice"].get<int>();
  if (doc.contains("autogroup_nice") && doc["autogroup_nice"].is_number_integer())
    result.group_nice = doc["autogroup_nice"].get<int>();
  if (doc.contains("links_world") && doc["links_world"].is_number_integer())
    result.links_world = doc["links_world"].get<int>();
  if (doc.contains("links") && doc["links"].is_object())
    for (const auto& [kind, link] : doc["links"].items()) {
      const bool shaped = link.is_object() && link.contains("alpha_s") && link["alpha_s"].is_number() &&
                          link.contains("beta_bytes_per_s") && link["beta_bytes_per_s"].is_number();
      if (!shaped || !(link["alpha_s"].get<double>() >= 0) || !(link["beta_bytes_per_s"].get<double>() > 0) ||
          !std::isfinite(link["alpha_s"].get<double>()) || !std::isfinite(link["beta_bytes_per_s"].get<double>()))
        return fail(fmt::format("{}: link '{}' is not {{\"alpha_s\": α ≥ 0, \"beta_bytes_per_s\": β > 0}}", source, kind),
                    hint);
      result.links[kind] = {.alpha = link["alpha_s"].get<double>(), .beta = link["beta_bytes_per_s"].get<double>()};
    }
  std::map<std::string, PlanRun> found;
  for (const nlohmann::json& run : doc["runs"]) {
    const bool shaped = run.is_object() && run.contains("name") && run["name"].is_string() && run.contains("step_s") &&
                        run["step_s"].is_array() && !run["step_s"].empty() && run.contains("peak_bytes") &&
                        run["peak_bytes"].is_array() && !run["peak_bytes"].empty();
    if (!shaped) return fail(fmt::format("{}: a run without name, step_s and peak_bytes", source), hint);
    PlanRun r{.name = run["name"].get<std::string>(), .rounds = {}, .load = {}, .peak_bytes = {}};
    const std::string where = fmt::format("{}: plan '{}'", source, r.name);
    const nlohmann::json& step_s = run["step_s"];
    for (const nlohmann::json& round : step_s.front().is_array() ? step_s : nlohmann::json::array({step_s})) {
      LOOM_ASSIGN_OR_RETURN(std::vector<double> steps, parse_round(round, where, hint));
      r.rounds.push_back(std::move(steps));
    }
    if (run.contains("load") && run["load"].is_array())
      for (const nlohmann::json& l : run["load"])
        if (l.is_number()) r.load.push_back(l.get<double>());
    for (const nlohmann::json& b : run["peak_bytes"]) {
      if (!b.is_number_integer() || b.get<std::int64_t>() < 0)
        return fail(fmt::format("{} has a peak that is not a whole number of bytes", where), hint);
      r.peak_bytes.push_back(b.get<std::int64_t>());
    }
    found[r.name] = std::move(r);
  }
  for (const std::string& name : names) {
    auto it = found.find(name);
    if (it == found.end())
      return fail(fmt::format("{} has no run of plan '{}'", source, name),
                  "measure the same plan set (--plans) as the file was made with");
    result.runs.push_back(it->second);
  }
  return result;
}

std::string plan_runs_json(const PlanRuns& runs) {
  nlohmann::json doc = {{"version", 1}, {"nice", runs.nice}, {"runs", nlohmann::json::array()}};
  if (runs.group_nice) doc["autogroup_nice"] = *runs.group_nice;
  for (const auto& [kind, link] : runs.links)
    doc["links"][kind] = {{"alpha_s", link.alpha}, {"beta_bytes_per_s", link.beta}};
  if (!runs.links.empty()) doc["links_world"] = runs.links_world;
  for (const PlanRun& r : runs.runs)
    doc["runs"].push_back({{"name", r.name}, {"step_s", r.rounds}, {"load", r.load}, {"peak_bytes", r.peak_bytes}});
  return doc.dump(1) + "\n";
}

Expected<PlanRuns> run_plans(const TimerSetup& python, const std::vector<std::string>& names,
                             const std::vector<std::string>& dirs, int steps, int repeats, int links_world,
                             const std::string& scratch) {
  nlohmann::json spec = {{"version", 1},           {"steps", steps},
                         {"repeats", repeats},     {"links_world", links_world},
                         {"runs", nlohmann::json::array()}};
  for (std::size_t i = 0; i < names.size(); ++i)
    spec["runs"].push_back({{"name", names[i]}, {"dir", std::filesystem::absolute(dirs[i]).string()}});
  const std::string runs_path = (std::filesystem::path(scratch) / "runs.json").string();
  const std::string results_path = (std::filesystem::path(scratch) / "results.json").string();
  LOOM_RETURN_IF_ERROR(write_file_atomically(runs_path, spec.dump(1) + "\n", "the calibration's runs"));
  LOOM_RETURN_IF_ERROR(run_timer(python, {runs_path, "--out", results_path}, "loom_profile.plan_runs"));
  LOOM_ASSIGN_OR_RETURN(const std::string text,
                        read_input_file(results_path, "plan runs", "python/loom_profile/plan_runs.py writes it"));
  return parse_plan_runs(text, results_path, names);
}

}  // namespace loom::cli
