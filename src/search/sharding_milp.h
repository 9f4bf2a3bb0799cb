// The exact MILP of a (small, presolved) sharding problem, solved by COIN-OR CBC:
//   minimise   sum_{u,s} c_us x_us + sum_{(u,v),s,t} c_uvst y_uvst
//   subject to sum_s x_us = 1                       (one strategy per node; x binary)
//              sum_t y_uvst = x_us, sum_s y_uvst = x_vt   (y is the product of its ends, y >= 0)
//              sum_{u live at p} (m_us - min_s m_us) x_us <= limit - sum_{u live at p} min_s m_us
//                                                   (per start point p, only where it can bind)
// Forbidden entries get an upper bound of 0; with non-negative costs, every variable whose own cost
// exceeds the incumbent's total is fixed to 0 (it cannot be in a better choice). The LP relaxation is
// solved by Clp first: when its x are integral it is the optimum (y is then their product) and CBC is not
// started; otherwise CBC branches from its basis. Every step stops at the deadline.
#pragma once

#include <cstdint>
#include <optional>

#include "loom/search/sharding_problem.h"

namespace loom::search {

struct MilpOutcome {
  std::optional<ShardingChoice> choice;  // the best found, if any
  bool proven_optimal = false;           // optimal, or proven infeasible when choice is empty
  bool stopped_at_deadline = false;      // the time ran out (in building the model: CBC did not start)
};

// The problem's size in the MILP's terms: strategies plus edge cells.
std::int64_t milp_cells(const ShardingProblem& problem);

// `incumbent`: a feasible choice to start from (may be null); `node_limit`: CBC's branch-and-bound nodes;
// `seconds` (0: none): the time from the call, the model's building included, after which it stops.
MilpOutcome solve_milp(const ShardingProblem& problem, const ShardingChoice* incumbent, std::int64_t node_limit,
                       double seconds);

}  // namespace loom::search
