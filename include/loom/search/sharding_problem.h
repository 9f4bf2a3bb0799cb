// The solver boundary of intra-operator sharding (DESIGN.md "Search"): plain data in, a choice out, and
// an independent evaluator that recomputes a choice's cost, as XLA's auto-sharding does. It is the
// problem of the IOPDDL contest (ASPLOS '25; ../shared/benchmarks/iopddl/): each node (an op, or a
// coarsened group of ops) has strategies, each with a cost and a memory usage live over the node's time
// interval; each edge has a cost for every pair of its ends' strategies (resharding). Pick one strategy
// per node, minimising the total of node and edge costs, such that at every time point the usages of the
// live nodes sum to at most the limit. Loom's strategy graph (a stage's ops on a device mesh) is built as
// such a problem; the contest's instances are read into it unchanged.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "loom/core/error.h"

namespace loom::search {

// A cost or usage with this value marks a forbidden choice (the contest's marker).
inline constexpr std::int64_t kForbidden = std::numeric_limits<std::int64_t>::max();

// a + b for non-negative costs, saturating at kForbidden (which stays forbidden).
constexpr std::int64_t add_costs(std::int64_t a, std::int64_t b) {
  if (a == kForbidden || b == kForbidden) return kForbidden;
  return b > kForbidden - a ? kForbidden : a + b;
}

struct ShardingNode {
  std::string name;                  // for messages ("h3.attn.qkv"); may be empty (contest instances)
  std::int64_t start = 0;            // live over [start, end); start == end: never live (no usage counted)
  std::int64_t end = 0;
  std::vector<std::int64_t> costs;   // per strategy
  std::vector<std::int64_t> usages;  // per strategy, the same count as costs
};

struct ShardingEdge {
  int from = 0;                      // node indices
  int to = 0;
  std::vector<std::int64_t> costs;   // row-major: costs[s_from * |strategies(to)| + s_to]
};

struct ShardingProblem {
  std::string name;
  std::vector<ShardingNode> nodes;
  std::vector<ShardingEdge> edges;
  std::int64_t usage_limit = kForbidden;  // kForbidden: no memory limit
};

struct ShardingChoice {
  std::vector<int> strategies;  // per node
};

// Errors naming the node or edge: a node without strategies, costs and usages of different counts, an
// interval ending before it starts, an edge naming a missing node, an edge cost table of the wrong size.
Expected<void> check_problem(const ShardingProblem& problem);

struct ChoiceCost {
  std::int64_t total = 0;        // node costs + edge costs (saturating at kForbidden)
  std::int64_t peak_usage = 0;   // the largest sum of live usages over time
  std::int64_t peak_time = 0;    // a time point where it is reached
};

// The cost `edge` charges for the strategies `choice` gives its ends. Unchecked: the choice has one strategy
// in range per node (a forbidden pair gives kForbidden).
std::int64_t edge_cost(const ShardingProblem& problem, const ShardingEdge& edge, const ShardingChoice& choice);

// A choice's node and edge costs summed (saturating at kForbidden), nothing checked: the choice has one
// strategy in range per node; forbidden costs and the usage limit are not looked at (a solver stage's choice
// may be over the limit). evaluate_choice's total, for a choice it accepts.
std::int64_t choice_cost_sum(const ShardingProblem& problem, const ShardingChoice& choice);

// Recomputes a choice's cost from the problem alone (the independent evaluator). Errors: a choice of the
// wrong length or a strategy out of range (naming the node), a forbidden node or edge choice (naming
// it), a peak usage over the limit (naming the time point and the usage).
Expected<ChoiceCost> evaluate_choice(const ShardingProblem& problem, const ShardingChoice& choice);

}  // namespace loom::search
