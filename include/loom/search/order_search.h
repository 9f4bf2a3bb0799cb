// The constraint order search (DESIGN.md "Search", nnScaler §4's temporal ordering with Tessel's Z3
// formulation): the per-device order of an order request (order_request.h) with the least makespan.
//
// The model, over integer start times s_b and the makespan C:
//   s_b >= head(b), s_b + duration(b) + tail(b) <= C          (order_bounds.h)
//   s_b >= s_a + duration(a)                                  for every dependency, constraint, release a -> b
//   o_ab ? s_b >= s_a + duration(a) : s_a >= s_b + duration(b)  for two blocks of one device not already
//                                                             ordered by a path (one Boolean per pair)
//   holds(b) + sum over a != b on b's device of holds(a) [a before b] - holds(a) [release(a) before b] <= cap
//                                                             for every block b that holds memory, or, on a
//                                                             device whose holders are first in first out,
//                                                             the same as order edges (memory_edges)
// Bound tightening: a greedy order (order_bounds.h) and the request's initial order give an upper bound,
// the critical path and the one-machine relaxation a lower bound; the solver is asked for C <= T, first at
// the lower bound (proving the optimum at once where it is tight), then bisecting; for each T the pairs
// whose time windows allow one order are fixed first (window_graph), which refutes some T without a call. Every answer is re-timed by evaluate_order, the
// independent evaluator. When no order satisfies the constraints, the error names a minimal conflicting
// set of them (Z3's unsat core, shrunk one constraint at a time). Deterministic: a fixed seed, one
// thread, and the budget counted in Z3's resource units (order_request.h, OrderBudget).
#pragma once

#include <cstdint>
#include <vector>

#include "loom/core/error.h"
#include "loom/search/order_request.h"

namespace loom::search {

struct OrderSolution {
  std::vector<std::vector<int>> order;  // per device, block indices in execution order
  std::vector<std::int64_t> start;      // per block (evaluate_order's earliest times for the order)
  std::int64_t makespan = 0;
  std::int64_t lower_bound = 0;         // no order ends before this (raised by every unsat answer)
  bool proven_optimal = false;          // lower_bound == makespan
  bool from_solver = false;             // Z3 found the order (else the greedy's or the initial order stood)
  int solver_calls = 0;
  int decided_pairs = 0;                // pairs of one device's blocks left for the solver to order
};

// Errors: a request check_request refuses; an initial order evaluate_order refuses or finds violations in;
// constraints (with the data flow and the memory caps) that no
// order satisfies, naming a minimal conflicting set; a budget spent before any order was found.
Expected<OrderSolution> solve_order(const OrderRequest& request);

}  // namespace loom::search
