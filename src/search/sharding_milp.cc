#include "sharding_milp.h"

#include <coin/CbcEventHandler.hpp>
#include <coin/CbcModel.hpp>
#include <coin/ClpEventHandler.hpp>
#include <coin/CoinPackedMatrix.hpp>
#include <coin/CoinPackedVector.hpp>
#include <coin/OsiClpSolverInterface.hpp>

#include <algorithm>
#include <cmath>
#include <chrono>
#include <map>
#include <optional>
#include <vector>

namespace loom::search {
namespace {

// Simplex iterations one LP may take (Clp otherwise may stall for minutes on a badly scaled region).
constexpr int kLpIterations = 50'000;
// An LP value this close to 0 or 1 counts as integral.
constexpr double kIntegral = 1e-7;

using Clock = std::chrono::steady_clock;

// CBC checks its own time limit between branch-and-bound nodes only, so one long LP (the root's, or a
// node's) ran past it by tens of seconds. These handlers stop at the deadline wherever CBC or Clp
// reports an event: after every simplex iteration and after every node, heuristic and cut pass.
class ClpDeadline : public ClpEventHandler {
 public:
  explicit ClpDeadline(Clock::time_point deadline) : deadline_(deadline) {}
  int event(Event which) override { return which == endOfIteration && Clock::now() >= deadline_ ? 0 : -1; }
  ClpEventHandler* clone() const override { return new ClpDeadline(*this); }

 private:
  Clock::time_point deadline_;
};

class CbcDeadline : public CbcEventHandler {
 public:
  explicit CbcDeadline(Clock::time_point deadline) : deadline_(deadline) {}
  CbcAction event(CbcEvent) override { return Clock::now() >= deadline_ ? stop : noAction; }
  CbcEventHandler* clone() const override { return new CbcDeadline(*this); }

 private:
  Clock::time_point deadline_;
};

}  // namespace

std::int64_t milp_cells(const ShardingProblem& problem) {
  std::int64_t cells = 0;
  for (const ShardingNode& n : problem.nodes) cells += static_cast<std::int64_t>(n.costs.size());
  for (const ShardingEdge& e : problem.edges) cells += static_cast<std::int64_t>(e.costs.size());
  return cells;
}

MilpOutcome solve_milp(const ShardingProblem& problem, const ShardingChoice* incumbent, std::int64_t node_limit,
                       double seconds) {
  // The time counts from the call: building the model is part of it.
  std::optional<Clock::time_point> deadline;
  if (seconds > 0)
    deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  const std::size_t n = problem.nodes.size();
  bool nonnegative = true;
  for (const ShardingNode& node : problem.nodes)
    for (std::int64_t c : node.costs) nonnegative = nonnegative && c >= 0;
  for (const ShardingEdge& edge : problem.edges)
    for (std::int64_t c : edge.costs) nonnegative = nonnegative && c >= 0;
  double bound = std::numeric_limits<double>::infinity();  // a variable costing more is fixed to 0
  if (incumbent && nonnegative) {
    if (auto cost = evaluate_choice(problem, *incumbent)) bound = static_cast<double>(cost->total);
  }

  std::vector<double> objective, lower, upper;
  auto column = [&](std::int64_t cost) {
    const bool banned = cost == kForbidden || static_cast<double>(cost) > bound;
    objective.push_back(banned ? 0.0 : static_cast<double>(cost));
    lower.push_back(0.0);
    upper.push_back(banned ? 0.0 : 1.0);
    return static_cast<int>(objective.size()) - 1;
  };
  std::vector<int> first_x(n);
  for (std::size_t u = 0; u < n; ++u) {
    const ShardingNode& node = problem.nodes[u];
    first_x[u] = static_cast<int>(objective.size());
    for (std::size_t s = 0; s < node.costs.size(); ++s) column(node.usages[s] == kForbidden ? kForbidden : node.costs[s]);
  }
  const int x_count = static_cast<int>(objective.size());

  // Rows as (row, column, value) triplets, the matrix made once at the end: appending rows one by one to
  // a CoinPackedMatrix copies it each time (B's 1096 edges: ~7 s of copying before CBC started).
  std::vector<int> cell_rows, cell_columns;
  std::vector<double> cell_values;
  std::vector<double> row_lower, row_upper;
  auto add_row = [&](const CoinPackedVector& row, double lo, double hi) {
    const int r = static_cast<int>(row_lower.size());
    for (int j = 0; j < row.getNumElements(); ++j) {
      cell_rows.push_back(r);
      cell_columns.push_back(row.getIndices()[j]);
      cell_values.push_back(row.getElements()[j]);
    }
    row_lower.push_back(lo);
    row_upper.push_back(hi);
  };
  for (std::size_t u = 0; u < n; ++u) {
    CoinPackedVector row;
    for (std::size_t s = 0; s < problem.nodes[u].costs.size(); ++s) row.insert(first_x[u] + static_cast<int>(s), 1.0);
    add_row(row, 1.0, 1.0);
  }
  for (const ShardingEdge& edge : problem.edges) {
    const auto from = static_cast<std::size_t>(edge.from);
    const auto to = static_cast<std::size_t>(edge.to);
    const std::size_t kf = problem.nodes[from].costs.size();
    const std::size_t kt = problem.nodes[to].costs.size();
    const int first_y = static_cast<int>(objective.size());
    for (std::int64_t c : edge.costs) column(c);
    for (std::size_t s = 0; s < kf; ++s) {  // sum_t y_st - x_s = 0
      CoinPackedVector row;
      for (std::size_t t = 0; t < kt; ++t) row.insert(first_y + static_cast<int>(s * kt + t), 1.0);
      row.insert(first_x[from] + static_cast<int>(s), -1.0);
      add_row(row, 0.0, 0.0);
    }
    for (std::size_t t = 0; t < kt; ++t) {  // sum_s y_st - x_t = 0
      CoinPackedVector row;
      for (std::size_t s = 0; s < kf; ++s) row.insert(first_y + static_cast<int>(s * kt + t), 1.0);
      row.insert(first_x[to] + static_cast<int>(t), -1.0);
      add_row(row, 0.0, 0.0);
    }
  }
  if (problem.usage_limit != kForbidden) {
    std::vector<std::int64_t> points;
    for (const ShardingNode& node : problem.nodes)
      if (node.start < node.end) points.push_back(node.start);
    std::sort(points.begin(), points.end());
    points.erase(std::unique(points.begin(), points.end()), points.end());
    for (std::int64_t p : points) {
      double base = 0, most = 0;
      CoinPackedVector row;
      for (std::size_t u = 0; u < n; ++u) {
        const ShardingNode& node = problem.nodes[u];
        if (!(node.start <= p && p < node.end)) continue;
        std::int64_t least = kForbidden, largest = 0;
        for (std::int64_t m : node.usages)
          if (m != kForbidden) least = std::min(least, m), largest = std::max(largest, m);
        if (least == kForbidden) continue;
        base += static_cast<double>(least);
        most += static_cast<double>(largest - least);
        for (std::size_t s = 0; s < node.usages.size(); ++s)
          if (node.usages[s] != kForbidden && node.usages[s] != least)
            row.insert(first_x[u] + static_cast<int>(s), static_cast<double>(node.usages[s] - least));
      }
      const double room = static_cast<double>(problem.usage_limit) - base;
      if (most <= room) continue;
      if (room > 0) {  // scaled to a right-hand side of 1: usages (bytes, ~1e10) beside 0/1 rows stall Clp
        CoinPackedVector scaled;
        for (int j = 0; j < row.getNumElements(); ++j) scaled.insert(row.getIndices()[j], row.getElements()[j] / room);
        add_row(scaled, -COIN_DBL_MAX, 1.0);
      } else {
        add_row(row, -COIN_DBL_MAX, room);
      }
    }
  }

  MilpOutcome outcome;
  if (deadline && Clock::now() >= *deadline) {  // the model took the time: CBC does not start
    outcome.stopped_at_deadline = true;
    return outcome;
  }
  CoinPackedMatrix matrix(false, cell_rows.data(), cell_columns.data(), cell_values.data(),
                          static_cast<CoinBigIndex>(cell_values.size()));
  // Triplets size it to the last row and column used; an empty last row or column still counts.
  matrix.setDimensions(static_cast<int>(row_lower.size()), static_cast<int>(objective.size()));
  OsiClpSolverInterface solver;
  solver.messageHandler()->setLogLevel(0);
  if (deadline) {
    const ClpDeadline lp_deadline(*deadline);
    solver.getModelPtr()->passInEventHandler(&lp_deadline);  // copied, and copied on with the solver
  }
  solver.loadProblem(matrix, lower.data(), upper.data(), objective.data(), row_lower.data(), row_upper.data());
  for (int i = 0; i < x_count; ++i) solver.setInteger(i);
  solver.setIntParam(OsiMaxNumIteration, kLpIterations);  // a bound on any one LP, whatever its numerics
  solver.setIntParam(OsiMaxNumIterationHotStart, kLpIterations);
  // The LP relaxation first, by Clp alone: on the contest's instances it is often integral (B's is), and
  // then it is the optimum, without CBC's root work and its check of the solution (a primal simplex from
  // scratch that ignored the deadline: B ended 12 s past a 30 s timeout in it). CBC then starts from its basis.
  // Clp's presolve first: without it the dual simplex stalled on the group problems (D's, 105 671
  // columns: 2 iterations in 8 s, unfinished after 55 s; 0.9 s with it; B 7.5 -> 3.6 s, G 15.0 -> 2.0 s).
  // Off again for CBC, whose own initial solve would redo it from scratch.
  solver.setHintParam(OsiDoPresolveInInitial, true, OsiHintDo);
  solver.initialSolve();
  solver.setHintParam(OsiDoPresolveInInitial, false, OsiHintDo);
  const auto read_choice = [&](const double* values) {
    ShardingChoice choice;
    for (std::size_t u = 0; u < n; ++u) {
      int pick = 0;
      for (std::size_t s = 0; s < problem.nodes[u].costs.size(); ++s)
        if (values[first_x[u] + static_cast<int>(s)] > values[first_x[u] + pick]) pick = static_cast<int>(s);
      choice.strategies.push_back(pick);
    }
    return choice;
  };
  const bool lp_stopped = deadline && Clock::now() >= *deadline;
  if (solver.isProvenPrimalInfeasible() && !lp_stopped) {
    outcome.proven_optimal = true;  // no choice fits: the relaxation has none
    return outcome;
  }
  if (solver.isProvenOptimal() && !lp_stopped) {
    const double* values = solver.getColSolution();
    bool integral = true;
    for (int i = 0; i < x_count && integral; ++i) integral = std::abs(values[i] - std::round(values[i])) <= kIntegral;
    if (integral) {
      outcome.choice = read_choice(values);
      outcome.proven_optimal = true;
      return outcome;
    }
  }
  if (lp_stopped) {
    outcome.stopped_at_deadline = true;
    return outcome;
  }
  CbcModel model(solver);
  model.setLogLevel(0);
  model.messageHandler()->setLogLevel(0);
  model.setMaximumNodes(static_cast<int>(std::min<std::int64_t>(node_limit, 1 << 30)));
  if (deadline) {
    model.setMaximumSeconds(std::max(1e-3, std::chrono::duration<double>(*deadline - Clock::now()).count()));
    const CbcDeadline search_deadline(*deadline);
    model.passInEventHandler(&search_deadline);  // copied
  }
  std::vector<double> start;
  if (incumbent) {
    start.assign(objective.size(), 0.0);
    for (std::size_t u = 0; u < n; ++u) start[static_cast<std::size_t>(first_x[u] + incumbent->strategies[u])] = 1.0;
    int column_index = x_count;
    for (const ShardingEdge& edge : problem.edges) {
      const std::size_t kt = problem.nodes[static_cast<std::size_t>(edge.to)].costs.size();
      const auto s = static_cast<std::size_t>(incumbent->strategies[static_cast<std::size_t>(edge.from)]);
      const auto t = static_cast<std::size_t>(incumbent->strategies[static_cast<std::size_t>(edge.to)]);
      start[static_cast<std::size_t>(column_index) + s * kt + t] = 1.0;
      column_index += static_cast<int>(edge.costs.size());
    }
    double value = 0;
    for (std::size_t i = 0; i < start.size(); ++i) value += start[i] * objective[i];
    // Not checked by CBC (a primal simplex from scratch): y is exactly the product of the ends.
    model.setBestSolution(start.data(), static_cast<int>(start.size()), value, false);
  }
  model.branchAndBound();

  // An LP stopped at the deadline proves nothing, whatever status CBC then reports.
  const bool stopped = deadline && Clock::now() >= *deadline;
  outcome.stopped_at_deadline = stopped;
  outcome.proven_optimal = !stopped && (model.isProvenOptimal() || model.isProvenInfeasible());
  if (const double* best = model.bestSolution()) outcome.choice = read_choice(best);
  return outcome;
}

}  // namespace loom::search
