// The order search's driver: bounds, bisection on the makespan, and the unsat-core explanation
// (order_search.h).
#include "loom/search/order_search.h"

#include <algorithm>
#include <chrono>
#include <optional>

#include <fmt/format.h>

#include "loom/core/strings.h"
#include "loom/search/order_bounds.h"
#include "order_z3_model.h"

namespace loom::search {
namespace {

std::size_t us(int i) { return static_cast<std::size_t>(i); }

// The solver calls' budget: Z3's resource limit per call, and what is left of the wall-clock guard.
class Budget {
 public:
  explicit Budget(const OrderBudget& budget) : budget_(budget), begin_(std::chrono::steady_clock::now()) {}

  // Sets the next call's limits; false when no time is left.
  bool arm(z3::solver& solver, z3::context& ctx) const {
    z3::params p(ctx);
    p.set("random_seed", 0U);
    if (budget_.resource_limit > 0) p.set("rlimit", static_cast<unsigned>(std::min<std::uint64_t>(budget_.resource_limit, 0xffffffffU)));
    if (budget_.seconds > 0) {
      const double left = budget_.seconds - std::chrono::duration<double>(std::chrono::steady_clock::now() - begin_).count();
      if (left <= 0) return false;
      p.set("timeout", static_cast<unsigned>(std::max(1.0, left * 1000)));
    }
    solver.set(p);
    return true;
  }

 private:
  OrderBudget budget_;
  std::chrono::steady_clock::time_point begin_;
};

std::string describe(const OrderRequest& request, const TrackedPart& part) {
  if (part.kind == TrackedPart::Kind::constraint) {
    const OrderConstraint& c = request.constraints[us(part.index)];
    return fmt::format("constraint {} ({}: {} before {})", part.index, c.rule, block_label(request, c.before),
                       block_label(request, c.after));
  }
  const OrderBlock& b = request.blocks[us(part.index)];
  return fmt::format("the memory cap of device {} ({} units) while {} runs (holding {})", b.device,
                     request.memory_caps[us(b.device)], block_label(request, part.index), b.holds);
}

// No order satisfies the constraints: the error names a minimal set of them that conflict (with the data
// flow), from Z3's unsat core shrunk by dropping one part at a time while the rest stays unsat.
Error explain_conflict(const OrderRequest& request, const Budget& budget) {
  z3::context ctx;
  const OrderGraph graph = order_graph(request, false);
  OrderZ3Model model(ctx, request, graph, true);
  std::int64_t horizon = 0;  // any valid order, run as early as it can, ends by the sum of the durations
  for (const OrderBlock& b : request.blocks) horizon += b.duration;
  const z3::expr bound = model.makespan_at_most(horizon);
  const auto unsat_with = [&](const std::vector<std::size_t>& parts) {
    z3::expr_vector assumptions(ctx);
    assumptions.push_back(bound);
    for (std::size_t p : parts) assumptions.push_back(model.tracked_literals()[p]);
    return budget.arm(model.solver(), ctx) && model.solver().check(assumptions) == z3::unsat;
  };
  std::vector<std::size_t> all(model.tracked_literals().size());
  for (std::size_t p = 0; p < all.size(); ++p) all[p] = p;
  const std::string hint = "drop or relax one of them";
  if (!unsat_with(all))
    return Error{"order search: no order found within the budget, and none proven impossible",
                 "raise the budget (OrderBudget) or drop constraints"};
  std::vector<std::size_t> core;
  const z3::expr_vector z3_core = model.solver().unsat_core();
  for (std::size_t p = 0; p < all.size(); ++p)
    for (unsigned k = 0; k < z3_core.size(); ++k)
      if (z3::eq(z3_core[k], model.tracked_literals()[p])) core.push_back(p);
  for (std::size_t k = 0; k < core.size();) {
    std::vector<std::size_t> rest = core;
    rest.erase(rest.begin() + static_cast<std::ptrdiff_t>(k));
    if (unsat_with(rest))
      core = std::move(rest);
    else
      ++k;
  }
  std::vector<std::string> names;
  for (std::size_t p : core) names.push_back(describe(request, model.parts()[p]));
  if (names.empty())
    return Error{"order search: the data flow alone admits no order", "report this: check_request accepts it"};
  return Error{fmt::format("order search: no order satisfies these together: {}", join(names, "; ")), hint};
}

// The model's order, re-timed by the independent evaluator.
Expected<std::pair<std::vector<std::vector<int>>, OrderEvaluation>> timed(const OrderRequest& request,
                                                                           std::vector<std::vector<int>> order) {
  LOOM_ASSIGN_OR_RETURN(OrderEvaluation evaluation, evaluate_order(request, order));
  if (!evaluation.violations.empty())
    return fail(fmt::format("order search: the order breaks {}", join(evaluation.violations, "; ")),
                "an initial order must keep every constraint; else report this: the model and the evaluator disagree");
  return std::pair{std::move(order), std::move(evaluation)};
}

}  // namespace

Expected<OrderSolution> solve_order(const OrderRequest& request) {
  LOOM_RETURN_IF_ERROR(check_request(request));
  const Budget budget(request.budget);
  // The constraints' graph, then with the memory caps that are order edges (first in, first out).
  const OrderGraph constrained = order_graph(request);
  if (constrained.cyclic()) return std::unexpected(explain_conflict(request, budget));
  std::vector<bool> memory_in_graph;
  const std::vector<OrderEdge> memory = memory_edges(request, constrained, memory_in_graph);
  const OrderGraph graph = order_graph(request, true, memory);
  if (graph.cyclic()) return std::unexpected(explain_conflict(request, budget));

  OrderSolution solution;
  solution.lower_bound = makespan_lower_bound(request, graph);
  std::optional<OrderEvaluation> best;
  const auto keep = [&](std::pair<std::vector<std::vector<int>>, OrderEvaluation> found) {
    if (best && best->makespan <= found.second.makespan) return false;
    solution.order = std::move(found.first);
    best = std::move(found.second);
    return true;
  };
  if (!request.initial_order.empty()) {
    LOOM_ASSIGN_OR_RETURN(auto found, with_context(timed(request, request.initial_order), "the initial order"));
    keep(std::move(found));
  }
  if (auto greedy = request.greedy_upper_bound ? greedy_order(request, graph) : std::nullopt) {
    LOOM_ASSIGN_OR_RETURN(auto found, timed(request, std::move(*greedy)));
    keep(std::move(found));
  }

  std::int64_t horizon = 0;
  for (const OrderBlock& b : request.blocks) horizon += b.duration;
  // The least bound T with an order of makespan <= T lies in [lo, hi]; hi is the best order's makespan.
  std::int64_t lo = solution.lower_bound, hi = best ? best->makespan : horizon;
  bool first = true, stopped = false;
  while (lo < hi || !best) {
    // At the lower bound first (tight for most pipelines); then, without an order yet, at the horizon.
    const std::int64_t bound = first ? lo : !best ? hi : lo + (hi - lo) / 2;
    first = false;
    // Each bound gets its own model over the pairs its windows leave open (none open: no order ends by it).
    z3::check_result answer = z3::unsat;
    z3::context ctx;
    const std::optional<OrderGraph> window = window_graph(request, graph, memory, bound);
    std::optional<OrderZ3Model> model;
    if (window) {
      model.emplace(ctx, request, *window, false, memory_in_graph);
      solution.decided_pairs = model->decided_pairs();
      if (!budget.arm(model->solver(), ctx)) {
        stopped = true;
        break;
      }
      z3::expr_vector assumptions(ctx);
      assumptions.push_back(model->makespan_at_most(bound));
      ++solution.solver_calls;
      answer = model->solver().check(assumptions);
    }
    if (answer == z3::sat) {
      LOOM_ASSIGN_OR_RETURN(auto found, timed(request, model->order(model->solver().get_model())));
      hi = std::min(bound, found.second.makespan);
      if (keep(std::move(found))) solution.from_solver = true;
    } else if (answer == z3::unsat) {
      if (!best && bound >= hi) return std::unexpected(explain_conflict(request, budget));
      lo = bound + 1;
    } else {
      stopped = true;
      break;
    }
  }
  if (!best)
    return fail(fmt::format("order search: no order of the {} blocks found within the budget", request.blocks.size()),
                "raise the budget (OrderBudget)");
  solution.lower_bound = std::max(solution.lower_bound, std::min(lo, best->makespan));
  solution.makespan = best->makespan;
  solution.start = best->start;
  solution.proven_optimal = !stopped && solution.lower_bound == solution.makespan;
  return solution;
}

}  // namespace loom::search
