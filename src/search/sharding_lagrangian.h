// The Lagrangian search of the sharding solver: the usage limit is relaxed into prices, one multiplier
// per time point p (lambda_p >= 0), so a node's strategy s costs c_us + m_us * sum_{p live} lambda_p and
// the limit is dropped:
//   L(lambda) = min_x  cost(x) + sum_p lambda_p (usage_p(x) - limit).
// Each round approximately minimises the priced problem with the local search (sharding_local_search.h,
// no limit), warm-started from the last round's choice, then
//  - repairs the choice under the limit (sharding_repair.h) when its peak is near it (1.3 x) and polishes it with the limited local search,
//    keeping the best feasible choice found (an upper bound U);
//  - moves the multipliers along the projected subgradient g_p = usage_p - limit with Polyak's step
//    theta * (U - L) / |g|^2, theta halved when the best L has not risen for a few rounds.
// Prices make nodes at the peak trade usage for cost, which moves under the limit alone cannot do.
// Deterministic for a seed and the round and move budgets; a deadline only cuts it short.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>

#include "sharding_groups.h"
#include "sharding_local_search.h"

namespace loom::search {

struct LagrangianLimits {
  int rounds = 30;
  std::int64_t moves_per_round = 0;  // tree moves of each round's priced search; 0: free nodes / 16
  std::int64_t polish_moves = 0;     // limited tree moves on each repaired choice; 0: free nodes / 16
  std::optional<std::chrono::steady_clock::time_point> deadline;
  // When set, each round searches the priced problem over these groups (sharding_groups.h) and repairs
  // its choice group by group, falling back to the node repair.
  const NodeGroups* groups = nullptr;
};

struct LagrangianOutcome {
  ShardingChoice best;  // feasible whenever `start` was
  WideCost cost = 0;    // best's, forbidden choices priced as the local search prices them
  std::int64_t iterations = 0;  // tree moves, priced and limited
  int rounds = 0;
};

// `start` must fit the usage limit.
LagrangianOutcome lagrangian_search(const ShardingProblem& core, const ShardingChoice& start, std::uint64_t seed,
                                    const LagrangianLimits& limits);

// Under a deadline, the Lagrangian search again from the best choice so far, with fresh multipliers and
// another seed, while the last pass ran all its rounds and another as long fits before the deadline; the
// best choice of all passes. The rounds' best is a draw (T at 20 s: 0.986 and 1.12 x the contest's best from
// two seeds, found by round 6-13, later rounds no better): the time a fast first pass leaves over buys more
// draws, where the limited local search after it gains little. Without a deadline, one pass (deterministic).
LagrangianOutcome lagrangian_passes(const ShardingProblem& core, const ShardingChoice& start, std::uint64_t seed,
                                    const LagrangianLimits& limits);

}  // namespace loom::search
