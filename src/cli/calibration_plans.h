// The plans `loom calibrate` runs (docs/calibration.md): each a name and the `loom plan` flags that make it,
// from a plan file or the default set (small GPT-2 / LLaMA configurations under dp, tp, pp, ZeRO 1-3 and
// recomputation on 1 to 4 processes).
#pragma once

#include <string>
#include <vector>

#include "loom/api/job_options.h"
#include "loom/core/error.h"

namespace loom::cli {

struct CalibrationPlan {
  std::string name;
  std::vector<std::string> flags;  // `loom plan` flags, without --cluster, --profile, --fold
};

// The default set.
std::vector<CalibrationPlan> default_calibration_plans();

// A plan file: one plan a line, its name then its flags (`gpt-tp2 --arch gpt --layers 2 ... --tp 2`); blank
// lines and lines starting with # are skipped. Errors name the file and line: a duplicate name, a line
// without flags, more than 64 plans.
Expected<std::vector<CalibrationPlan>> read_calibration_plans(const std::string& path);

// The plan's job options: its flags parsed as `loom plan` parses them. Errors name the plan.
Expected<api::JobOptions> calibration_options(const CalibrationPlan& plan);

}  // namespace loom::cli
