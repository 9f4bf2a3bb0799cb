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

// The finalist of `order` to plan early, on the second core, beside the cheap ones queued before it
// (auto_search.h, step 4): the first slow to plan, where it is priced better (search::better) than every
// finalist before it. A full step is not below its analytic one on the finalists measured
// (bench/bench_auto_rank.cc), so the bound that skips a slow finalist priced no faster than the best full
// step so far would not skip it; and planned in its turn, it would keep one core idle for most of its
// planning (llama3-8b on 64 GPUs: the 64-replica ZeRO-1 winner, ~5 of 7 s, last). nullopt: none is, or
// nothing is queued before it.
std::optional<std::size_t> early_finalist(const RankedSpace& space, const std::vector<std::size_t>& order);

// The candidate after `i` in the same base configuration (the next recomputation), if priced.
std::optional<std::size_t> next_recompute(const RankedSpace& space, std::size_t i);

}  // namespace loom::api
