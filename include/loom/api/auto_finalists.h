// Which priced candidates a search plans in full (auto_search.h, step 4): plain data in (the candidates,
// their estimates, the ranking), indices out, so the rules are tested without planning anything.
//   auto      the top kFinalistsPerFamily plannable candidates of each family (megatron, zero, mixed), one
//             per base configuration, and megatron-best's and deepspeed-best's own finalists;
//   baseline  per base configuration the first recomputation priced to fit (else the last), then the top
//             kFinalistsPerFamily of those.
// A baseline's finalist (also when auto picked it too) follows its next recomputation when it does not fit
// in full, and is never dropped; auto's own picks slow to plan are dropped unless priced kExpensiveMargin
// faster than the best cheap pick. Cheap finalists are planned first, each group in rank order.
#pragma once

#include <cstddef>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "loom/search/analytic_cost.h"
#include "loom/search/plan_space.h"

namespace loom::api {

inline constexpr int kFinalistsPerFamily = 2;
// How much faster (priced) than the best cheap finalist a slow-to-plan finalist must be to be planned
// (the analytic step's error is a few percent, bench/bench_auto_rank.cc).
inline constexpr double kExpensiveMargin = 0.1;

struct RankedSpace {
  const std::vector<search::Candidate>& candidates;
  const std::vector<std::optional<search::Estimate>>& estimates;  // aligned; nullopt: not priced
  std::vector<std::size_t> ranked;  // the priced candidates, best first (search::better)
  int gpus_per_node = 0;  // the baselines' grids keep tp inside a node (search::in_baseline_grids; 0: any tp)
};

struct Finalists {
  std::vector<std::size_t> order;           // planning order
  std::set<std::size_t> follows_recompute;  // baselines' picks: followed by their next recomputation
};

// A candidate with its recomputation set to none: the base configuration the baselines group by.
std::string base_key(const search::Candidate& candidate);

// The finalists of `space`, as auto (baseline_rule false) or a baseline picks them.
Finalists pick_finalists(const RankedSpace& space, bool baseline_rule);

// The candidate after `i` in the same base configuration (the next recomputation), if priced.
std::optional<std::size_t> next_recompute(const RankedSpace& space, std::size_t i);

}  // namespace loom::api
