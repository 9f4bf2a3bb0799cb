#include "loom/api/baseline_search.h"

#include <fmt/format.h>

#include "loom/api/auto_search.h"
#include "loom/api/oases_plan.h"

namespace loom::api {

bool is_baseline(std::string_view policy) { return policy == "megatron-best" || policy == "deepspeed-best"; }
bool is_search(std::string_view policy) { return is_baseline(policy) || policy == "auto"; }

Expected<std::vector<BaselineCandidate>> baseline_candidates(const Job& loaded) {
  const std::string& baseline = loaded.options.policy;
  if (!is_baseline(baseline))
    return fail(fmt::format("unknown baseline '{}'", baseline), "use megatron-best or deepspeed-best");
  LOOM_ASSIGN_OR_RETURN(const search::SpaceFacts facts, space_facts(loaded));
  const bool megatron = baseline == "megatron-best";
  std::vector<BaselineCandidate> out = search::enumerate_space(
      facts, {.megatron = megatron, .zero = !megatron, .mixed = false, .zero_bubble = false});
  if (out.empty())
    return fail(fmt::format("{} has no configuration of {} GPUs for a global batch of {}", baseline, facts.gpus,
                            facts.global_batch),
                "choose a global batch divisible by the data-parallel degrees (--global-batch)");
  return out;
}

Expected<BaselineResult> best_baseline(const JobOptions& options, bool progress) {
  LOOM_ASSIGN_OR_RETURN(const std::unique_ptr<Job> loaded, load_job(options));
  LOOM_ASSIGN_OR_RETURN(const std::vector<BaselineCandidate> candidates, baseline_candidates(*loaded));
  return search_candidates(options, *loaded, candidates, true, progress);
}

Expected<std::unique_ptr<Job>> plan_or_search(const JobOptions& options, std::optional<SearchSummary>* search,
                                              bool progress) {
  if (uses_oases_planner(options) || options.policy == "oases") return oases_plan(options, search);
  if (!is_search(options.policy)) return plan_job(options);
  LOOM_ASSIGN_OR_RETURN(BaselineResult searched,
                        options.policy == "auto" ? auto_search(options, progress) : best_baseline(options, progress));
  if (search != nullptr) *search = std::move(searched.summary);
  return std::move(searched.best);
}

}  // namespace loom::api
