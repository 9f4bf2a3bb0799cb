// What `loom calibrate` measures of each plan, and how: the rank programs run by the runtime through
// python/loom_profile/plan_runs.py, whose results file (version 1) this reads.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loom/core/error.h"
#include "profile_timer.h"

namespace loom::cli {

struct PlanRun {
  std::string name;
  std::vector<double> step_s;             // the slowest rank's seconds of each step
  std::vector<std::int64_t> peak_bytes;   // per rank (python/loom/runtime/memory.py)

  // The median of the steps after the first (the first builds every op's form), or the only step.
  double measured_step() const;
};

// Runs the emitted programs in dirs[i] (named names[i]) for `steps` steps each, one after another; the
// runner prints a progress line per plan to stderr. `scratch` holds the runs and results files.
Expected<std::vector<PlanRun>> run_plans(const TimerSetup& python, const std::vector<std::string>& names,
                                         const std::vector<std::string>& dirs, int steps, const std::string& scratch);

// A results file as run_plans reads it: "runs" with every plan of `names` (in any order), each with at
// least one step and one rank. Errors name the file and the plan.
Expected<std::vector<PlanRun>> parse_plan_runs(const std::string& text, const std::string& source,
                                               const std::vector<std::string>& names);

}  // namespace loom::cli
