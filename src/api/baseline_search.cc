#include "loom/api/baseline_search.h"

#include <fmt/format.h>

#include <algorithm>

#include "loom/api/auto_search.h"
#include "loom/api/oases_plan.h"
#include "loom/core/strings.h"
#include "stage_clock.h"

namespace loom::api {

bool is_baseline(std::string_view policy) { return policy == "megatron-best" || policy == "deepspeed-best"; }
bool is_search(std::string_view policy) { return is_baseline(policy) || policy == "auto"; }

std::int64_t peak_bytes(const Job& job) {
  const sim::StepMetrics& m = job.metrics;
  return m.max_memory_device < 0 ? 0 : m.per_device[static_cast<std::size_t>(m.max_memory_device)].peak_bytes;
}

void fill_full(FinalistRow& row, const Job& job) {
  row.planned = true;
  row.full_seconds = job.metrics.step_time;
  row.full_peak = peak_bytes(job);
  row.full_fits = !job.metrics.out_of_memory();
  // The device that sets the step: the busiest, the one with the least idle time (the first on ties).
  const auto by_idle = [](const sim::DeviceMetrics& a, const sim::DeviceMetrics& b) { return a.idle < b.idle; };
  if (const auto busiest = std::ranges::min_element(job.metrics.per_device, by_idle);
      busiest != job.metrics.per_device.end()) {
    row.full_compute = busiest->compute;
    row.full_exposed_communication = busiest->exposed_communication;
    row.full_idle = busiest->idle;
  }
}

namespace {

// The baseline's whole grid, before any constraint file.
Expected<std::vector<BaselineCandidate>> baseline_grid(const Job& loaded) {
  const std::string& baseline = loaded.options.policy;
  if (!is_baseline(baseline))
    return fail(fmt::format("unknown baseline '{}'", baseline), "use megatron-best or deepspeed-best");
  LOOM_ASSIGN_OR_RETURN(const search::SpaceFacts facts, space_facts(loaded));
  const bool megatron = baseline == "megatron-best";
  std::vector<BaselineCandidate> out = search::enumerate_space(
      facts, {.megatron = megatron, .zero = !megatron, .mixed = false, .zero_bubble = false, .gpipe = false,
               .overlap = false, .tp_across_nodes = false});
  if (out.empty())
    return fail(fmt::format("{} has no configuration of {} GPUs for a global batch of {}", baseline, facts.gpus,
                            facts.global_batch),
                "choose a global batch divisible by the data-parallel degrees (--global-batch)");
  return out;
}

}  // namespace

Expected<std::vector<BaselineCandidate>> baseline_candidates(const Job& loaded) {
  LOOM_ASSIGN_OR_RETURN(std::vector<BaselineCandidate> grid, baseline_grid(loaded));
  return constrain_space(loaded, std::move(grid), fmt::format("{}'s grid", loaded.options.policy));
}

Expected<BaselineResult> best_baseline(const JobOptions& options, bool progress) {
  LOOM_ASSIGN_OR_RETURN(const std::unique_ptr<Job> loaded, load_job(options));
  LOOM_ASSIGN_OR_RETURN(std::vector<BaselineCandidate> grid, baseline_grid(*loaded));
  const int space = static_cast<int>(grid.size());
  LOOM_ASSIGN_OR_RETURN(const std::vector<BaselineCandidate> candidates,
                        constrain_space(*loaded, std::move(grid), fmt::format("{}'s grid", options.policy)));
  return with_space(search_candidates(options, *loaded, candidates, true, progress), space);
}

namespace {

// An explicit policy's configuration against the job's constraint file: refused with the entries it breaks.
Expected<void> check_explicit(const Job& loaded) {
  LOOM_ASSIGN_OR_RETURN(std::optional<search::ConstraintChecker> checker, job_constraints(loaded));
  if (!checker) return {};
  const policy::ParallelConfig& config = loaded.request.config;
  if (!config.layer_tp.empty())
    return fail("per-layer tensor-parallel degrees (--tp-layers) are not checked against a constraint file yet",
                "leave out --constraints, or give one tp for every layer (docs/constraints.md)");
  const std::int64_t per_step = std::int64_t{config.dp} * config.micro_batches;
  const std::int64_t samples = static_cast<std::int64_t>(loaded.workload.samples_per_step);
  const std::vector<search::Violation> broken =
      checker->violations({config, per_step > 0 ? samples / per_step : 1, loaded.options.offload});
  if (broken.empty()) return {};
  std::vector<std::string> lines;
  for (const search::Violation& v : broken) lines.push_back(fmt::format("entry {}: {}", search::to_string(v.entry), v.reason));
  return fail(fmt::format("policy {} breaks constraints file '{}': {}", describe(loaded.options.policy, config),
                          checker->constraints().source, join(lines, "; ")),
              "choose degrees the file allows, or --policy auto to search within it (docs/constraints.md)");
}

}  // namespace

Expected<std::unique_ptr<Job>> plan_or_search(const JobOptions& options, std::optional<SearchSummary>* search,
                                              bool progress) {
  if (uses_oases_planner(options) || options.policy == "oases") {
    if (!options.constraints.empty())
      return fail("the Oases planner (--policy oases, --tp-layers auto) does not take a constraint file yet",
                  "leave out --constraints, or use --policy auto within it (docs/constraints.md)");
    return oases_plan(options, search);
  }
  if (!is_search(options.policy) && !options.constraints.empty()) {
    const StageClock clock;
    LOOM_ASSIGN_OR_RETURN(std::unique_ptr<Job> job, load_job(options));
    LOOM_RETURN_IF_ERROR(check_explicit(*job));
    LOOM_RETURN_IF_ERROR(apply_policy(*job));
    LOOM_RETURN_IF_ERROR(materialize(*job));
    LOOM_RETURN_IF_ERROR(simulate(*job));
    job->seconds.total = clock.seconds();
    return job;
  }
  if (!is_search(options.policy)) return plan_job(options);
  LOOM_ASSIGN_OR_RETURN(BaselineResult searched,
                        options.policy == "auto" ? auto_search(options, progress) : best_baseline(options, progress));
  if (search != nullptr) *search = std::move(searched.summary);
  return std::move(searched.best);
}

}  // namespace loom::api
