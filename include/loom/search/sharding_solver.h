// The sharding solver (DESIGN.md "Search", intra-stage sharding): picks one strategy per node of a
// ShardingProblem, minimising node + edge cost under the usage limit. Steps, each in its own file:
//   presolve (src/search/sharding_presolve.h): dominated strategies dropped, fixed nodes folded into
//     their neighbours, usage-neutral nodes of degree <= 2 eliminated exactly (chains followed);
//   exact MILP (sharding_milp.h, COIN-OR CBC) when the presolved problem is small;
//   the group step (sharding_groups.h), when near-forbidden ties bind the nodes into groups (the contest's
//     instances: a few hundred groups): the problem over groups searched and solved by the MILP, its
//     choice (repaired) the start when it costs less; the Lagrangian rounds then search over groups;
//   otherwise local search: under a usage limit first the Lagrangian search (sharding_lagrangian.h: the
//     limit priced per time point, subgradient rounds, each round's choice repaired by sharding_repair.h
//     and polished), then the local search (sharding_local_search.h) from its best: best responses and
//     exact tree moves under an incrementally kept usage profile, one independent search per thread
//     with its own seed, the best kept.
// Each step ends by its share of the timeout and is recorded with its cost (sharding_stage_clock.h).
// The result is checked by evaluate_choice, the independent evaluator.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "loom/core/error.h"
#include "loom/search/progress_line.h"
#include "loom/search/sharding_problem.h"

namespace loom::search {

struct SolveOptions {
  double timeout_seconds = 0;        // wall-clock bound of the search; 0: none. Results then depend on timing.
                                     // Every stage stops by it; what follows (the choice's recovery and check,
                                     // milliseconds) may pass it.
  std::optional<std::chrono::steady_clock::time_point> started;  // the timeout counts from here (a caller's
                                     // start, its reading included); default: the call
  std::int64_t iterations = 0;       // tree moves per local search; 0: none (with no timeout: 20000)
  std::uint64_t seed = 1;            // search t uses seed + t
  int threads = 2;                   // independent local searches run side by side
  std::int64_t milp_max_cells = 400'000;  // the MILP is used when the presolved problem's strategies + edge
                                         // cells are at most this; 0: never
  std::int64_t milp_node_limit = 20'000; // CBC's branch-and-bound nodes (not proven optimal beyond)
  int lagrangian_rounds = 30;        // rounds of the Lagrangian search before the local search, under a
                                     // usage limit; 0: none
  ProgressLine* progress = nullptr;  // reports "local search" iterations and the best cost; may be null
};

// One stage of a solve and how it ended, for `loom solve-iopddl --json` and the deadline's tests.
struct SolveStage {
  enum class End { kDone, kDeadline, kSkipped };  // kDeadline: the timeout had passed when it ended;
                                                  // kSkipped: it had no time left to start
  std::string name;       // "presolve", "start", "feasibility", "groups", "group repair", "group descent",
                          // "start descent", "search", "milp"
  double allowed = 0;     // seconds from the start (options.started) it was given to end by; 0: no bound
  double ended = 0;       // seconds from the start when it ended
  End end = End::kDone;
  // The cost of the stage's best choice (the presolved problem's, which the recovery keeps), or none:
  // where each stage's gain or loss came from (the group step's choice before and after its repair).
  std::optional<std::int64_t> cost;
};

struct ShardingResult {
  ShardingChoice choice;
  ChoiceCost cost;                   // evaluate_choice's
  std::string method;                // "milp" or "local search"
  bool proven_optimal = false;       // the MILP closed its gap
  std::int64_t iterations = 0;       // tree moves, summed over the searches
  int free_nodes = 0;                // nodes left with more than one strategy after presolve
  int nodes_eliminated = 0;          // by presolve's series reduction
  std::int64_t strategies_dropped = 0;
  std::vector<SolveStage> stages;    // in the order they ran
};

// Errors: a problem check_problem rejects; a node whose every strategy is forbidden; no choice found
// under the usage limit (the least-usage choice exceeds it, or every found choice pays for a forbidden pair).
Expected<ShardingResult> solve_sharding(const ShardingProblem& problem, const SolveOptions& options);

}  // namespace loom::search
