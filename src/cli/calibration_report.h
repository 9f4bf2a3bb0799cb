// `loom calibrate`'s report: per plan the measured and predicted step and peak memory, the fitted
// constants, and the summary over the plans held out from the fit; as text, JSON and Markdown.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "loom/cluster/cluster.h"
#include "loom/cost/calibration.h"

namespace loom::cli {

struct PlanRow {
  std::string name;
  std::string flags;
  int processes = 1;
  bool fitted = false;
  double measured_s = 0;
  double predicted_s = 0;
  std::vector<std::int64_t> peak_measured;   // per rank
  std::vector<std::int64_t> peak_predicted;  // per rank, the memory model's
  std::vector<double> round_steps;           // per round, its step (calibration_runs.h); measured_s the least
  std::vector<double> load;                  // per round, the 1-minute load average at its start

  double error() const { return cost::relative_error(predicted_s, measured_s); }
  // The rank whose predicted peak is furthest from its measured one, as (predicted - measured) / measured.
  double peak_error() const;
};

struct CalibrationReport {
  cluster::Cluster cluster;  // the fitted one
  int steps = 0;   // per round
  int rounds = 1;
  int nice = 0;    // the measuring processes' niceness
  std::optional<int> group_nice;  // their session's scheduling group's (Linux autogroup)
  std::string profile;
  cost::FitResult fit;
  std::vector<std::string> constant_names;
  std::vector<std::string> constant_sources;  // per constant: "" fitted, "measured" (a link apart), "fixed" (--fix)
  int links_world = 0;                        // the processes the measured links ran among; 0: none measured
  std::vector<PlanRow> plans;
  std::vector<std::string> files;
};

struct CalibrationSummary {
  std::size_t held_out = 0;
  double median_abs_error = 0;   // held-out plans' step
  double spearman = 0;           // held-out plans: predicted vs measured step
  double fit_median_abs_error = 0;
  double peak_max_abs_error = 0;     // every plan's worst rank
  double peak_median_abs_error = 0;  // likewise, the median
};
CalibrationSummary summarize(const CalibrationReport& report);

std::string calibration_text(const CalibrationReport& report);
nlohmann::json calibration_json(const CalibrationReport& report);
std::string calibration_markdown(const CalibrationReport& report);

}  // namespace loom::cli
