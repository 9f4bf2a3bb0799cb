// Printing a planned, simulated step for `loom plan` and `loom compare`.
#pragma once

#include <string>
#include <vector>

#include "loom/api/plan_job.h"

namespace loom::cli {

// The model, cluster, plan, step, throughput, MFU, time breakdown, memory and stage timings of one plan,
// a line each; an OOM plan gets its per-device memory breakdown.
std::string plan_summary(const api::PlanResult& result);

// One row per plan, ranked by step time (plans that do not fit last), with throughput, MFU, peak memory.
std::string ranked_table(const std::vector<const api::PlanResult*>& results);

}  // namespace loom::cli
