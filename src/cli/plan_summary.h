// Printing a planned, simulated step for `loom plan` and `loom compare`.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "loom/api/baseline_search.h"
#include "loom/api/job.h"

namespace loom::cli {

// The model, cluster, plan, step, throughput, MFU, time breakdown, memory and stage timings of one plan,
// a line each; an OOM plan gets its per-device memory breakdown.
std::string plan_summary(const api::Job& job);

// "passes     ..." : what the exec passes changed (exec/passes.h), a line of `plan` and `verify`.
std::string passes_line(const exec::ExecPassStats& passes);

// "search     auto: N configurations, ..." (one line), and with `explain` the finalists (configuration,
// analytic rank, analytic and full step time and peak memory) and why the winner wins.
std::string search_summary(const api::SearchSummary& search, bool explain);

// One row per plan, ranked by step time (plans that do not fit last), with throughput, MFU, peak memory.
std::string ranked_table(const std::vector<const api::Job*>& jobs);

// The same as JSON (docs/json.md, "loom plan --json"): the options given and as resolved, the search, the
// simulator's summary and, for a plan that does not fit, the memory advice.
nlohmann::ordered_json plan_json(const api::Job& job, const std::optional<api::SearchSummary>& search);

}  // namespace loom::cli
