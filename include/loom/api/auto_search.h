// The searches (DESIGN.md, "Search"; docs/search.md): `auto` and the baselines megatron-best and
// deepspeed-best (baseline_search.h) share one procedure:
//   1. enumerate the space (search/plan_space.h: auto the whole of it, a baseline its own grid);
//   2. measure the cost facts once per class (search_facts.h: one-layer slices planned in full);
//   3. price every candidate analytically (search/analytic_cost.h), rank them: fits first, then faster;
//   4. plan in full (plan_job: materialize, check, simulate) the finalists (api/auto_finalists.h: auto
//      each family's best and the baselines' own picks, so it is never slower than they are), two at a
//      time, the cheap first (a large one folds: exec/fold.h, megatron one micro-batch of one replica, ZeRO
//      within a node one micro-batch of every replica, repeated); without a budget, the first finalist slow
//      to plan, where it is priced better than every cheap one queued before it, starts at once on the
//      second core beside them (auto_finalists.h, early_finalist), its result taken in its turn, so the
//      rows and the winner are the queue's. Every search skips a finalist slow to plan whose analytic step
//      is no faster than the best fitting full step already planned: the analytic step prices what the
//      full path prices less what it cannot see (bench_auto_rank: it is below the full step on the
//      finalists measured), so such a finalist would not win. k is small because the analytic ranking puts
//      the full path's optimum among its first few (bench/bench_auto_rank.cc reports the rank correlation
//      and where the optimum falls). When no finalist fits in full, the candidates priced smallest are
//      planned (at most kFinalistsPerFamily more: the costing underestimated the finalists' memory);
//      when none could be planned at all, on down the ranking until one is. auto also runs the Oases
//      planner (oases_plan.h: per-layer tp degrees) on its best-ranked overlapped candidate without a
//      pipeline that fits (the planner prices one stage of a preset's numbered layers), and plans its
//      choice in full as one more finalist (a uniform choice is that candidate's own plan), so auto is no
//      slower than the planner there.
//   5. the best full result wins: fits, then faster (neither fits: smaller); ties: the better rank.
// Deterministic: the same options give the same winner and the same summary (but its seconds).
// `options.budget` (seconds, 0: none) stops pricing and planning when spent, keeping the best so far
// (at least one finalist is always planned in full). Within it, a finalist whose explicit plan is
// predicted to end past the budget is skipped with a row saying so: its planning work
// (policy::explicit_plan_bytes) at the slowest rate (seconds per work) of the large explicit plans already
// planned (a folded or small plan's fixed costs would inflate it: alphafold2-3.2b's folded megatron
// finalists predicted 810 s for a ZeRO plan that takes 250 s); the first large explicit plan, before any
// rate is known, is planned alone and always.
// An explicit plan of thousands of ops on dozens of GPUs (AlphaFold2-3.2B's ZeRO on 32 GPUs: minutes
// each, growing faster than its depth) thus cannot run the search far past its budget, except the first.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "loom/api/auto_finalists.h"
#include "loom/api/baseline_search.h"
#include "loom/api/job.h"
#include "loom/search/analytic_cost.h"
#include "loom/search/plan_constraints.h"
#include "loom/search/plan_space.h"

namespace loom::api {

// Plans `candidates` of a job loaded with a search as its policy (steps 2-5 above); `name` is the search
// ("auto", "megatron-best", "deepspeed-best"), `baseline_rule` picks finalists as the baselines do.
// `progress`: a live line on stderr. Errors: no candidate could be priced, none could be planned in full.
Expected<BaselineResult> search_candidates(const JobOptions& options, const Job& loaded,
                                           const std::vector<search::Candidate>& candidates, bool baseline_rule,
                                           bool progress);

// `--policy auto`: the whole space, within options.constraints when given. Errors: as search_candidates
// and constrain_space.
Expected<BaselineResult> auto_search(const JobOptions& options, bool progress = false);

// auto's whole space of a loaded job, each candidate priced (nullopt: its class could not be measured,
// or pricing stopped), as the search ranks them (bench/bench_auto_rank.cc and the tests compare them with
// the full path). Errors: as search_candidates.
struct PricedSpace {
  std::vector<search::Candidate> candidates;
  std::vector<std::optional<search::Estimate>> estimates;  // aligned with candidates
};
Expected<PricedSpace> price_space(const Job& loaded);

// The loaded job's constraint file (options.constraints) bound to its graph and GPUs; nullopt when none is
// given. Errors: those of search::read_plan_constraints and ConstraintChecker::bind.
Expected<std::optional<search::ConstraintChecker>> job_constraints(const Job& loaded);

// `candidates` within the job's constraint file (all of them without one), in their order; `space` names
// them in errors ("auto's space"). Errors: job_constraints', and none left (the entries that exclude all).
Expected<std::vector<search::Candidate>> constrain_space(const Job& loaded, std::vector<search::Candidate> candidates,
                                                         std::string_view space);

// A search's result with its summary naming the constraint file and the space before it (`space`
// candidates); the result as it is without a file.
Expected<BaselineResult> with_space(Expected<BaselineResult> result, int space);

// The space's facts of a loaded job (GPUs, node size, global batch, layers, which tp degrees take
// sequence parallelism, how its micro-batches may be cut).
Expected<search::SpaceFacts> space_facts(const Job& loaded);

}  // namespace loom::api
