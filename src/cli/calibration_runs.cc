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

double PlanRun::measured_step() const {
  if (step_s.size() < 2) return step_s.empty() ? 0 : step_s.front();
  return cost::median(std::vector<double>(step_s.begin() + 1, step_s.end()));
}

Expected<std::vector<PlanRun>> parse_plan_runs(const std::string& text, const std::string& source,
                                               const std::vector<std::string>& names) {
  const nlohmann::json doc = nlohmann::json::parse(text, nullptr, false);
  const std::string hint = "write it with `loom calibrate --out DIR` (DIR/measured.json)";
  if (doc.is_discarded() || !doc.is_object() || doc.value("version", 0) != 1 || !doc.contains("runs") ||
      !doc["runs"].is_array())
    return fail(fmt::format("{} is not a plan runs file (version 1 with \"runs\")", source), hint);
  std::map<std::string, PlanRun> found;
  for (const nlohmann::json& run : doc["runs"]) {
    const bool shaped = run.is_object() && run.contains("name") && run["name"].is_string() && run.contains("step_s") &&
                        run["step_s"].is_array() && !run["step_s"].empty() && run.contains("peak_bytes") &&
                        run["peak_bytes"].is_array() && !run["peak_bytes"].empty();
    if (!shaped) return fail(fmt::format("{}: a run without name, step_s and peak_bytes", source), hint);
    PlanRun r{.name = run["name"].get<std::string>(), .step_s = {}, .peak_bytes = {}};
    for (const nlohmann::json& s : run["step_s"]) {
      if (!s.is_number() || !(s.get<double>() > 0) || !std::isfinite(s.get<double>()))
        return fail(fmt::format("{}: plan '{}' has a step time that is not a positive number", source, r.name), hint);
      r.step_s.push_back(s.get<double>());
    }
    for (const nlohmann::json& b : run["peak_bytes"]) {
      if (!b.is_number_integer() || b.get<std::int64_t>() < 0)
        return fail(fmt::format("{}: plan '{}' has a peak that is not a whole number of bytes", source, r.name), hint);
      r.peak_bytes.push_back(b.get<std::int64_t>());
    }
    found[r.name] = std::move(r);
  }
  std::vector<PlanRun> runs;
  for (const std::string& name : names) {
    auto it = found.find(name);
    if (it == found.end())
      return fail(fmt::format("{} has no run of plan '{}'", source, name),
                  "measure the same plan set (--plans) as the file was made with");
    runs.push_back(it->second);
  }
  return runs;
}

Expected<std::vector<PlanRun>> run_plans(const TimerSetup& python, const std::vector<std::string>& names,
                                         const std::vector<std::string>& dirs, int steps, const std::string& scratch) {
  nlohmann::json spec = {{"version", 1}, {"steps", steps}, {"runs", nlohmann::json::array()}};
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
