// Groups of nodes tied by near-forbidden edge costs, and the problem over the groups (the solver's group
// step, DESIGN.md "Search"). An edge table that permutes strategies (a tensor and its consumers sharded
// alike) leaves a node one affordable strategy per strategy of its neighbour; the contest's instances
// tie most nodes so, into a few hundred groups (D: 27257 free nodes in 228 groups). A group moves as one:
// its root's strategy fixes every member's. The group problem has one node per group (the root's
// strategies; costs: the members' node costs and the edges inside the group) and one edge per pair of
// adjacent groups (the sum of the edges between them), without usages: small enough for the exact MILP,
// and searched by tree moves that span groups, where node-level moves would break a tie (a 1e18 cost).
// Every group choice expands to a node choice of the same cost (the restriction only drops choices
// that pay a near-forbidden cost inside a group).
#pragma once

#include <vector>

#include "loom/search/sharding_problem.h"

namespace loom::search {

struct NodeGroups {
  std::vector<int> group_of;              // per node; -1 for a node with one strategy
  std::vector<std::vector<int>> members;  // per group, its root first
  std::vector<std::vector<int>> follow;   // per grouped node: its strategy for each of its root's strategies

  std::size_t count() const { return members.size(); }
};

// Grows groups breadth-first from roots taken in a topological order of the tie relation (a node whose
// strategy fixes a neighbour's comes before it): a node joins when, for each affordable root strategy,
// exactly one of its affordable strategies avoids near-forbidden costs against the members it touches.
NodeGroups group_nodes(const ShardingProblem& core);

// The problem over the groups (no usages, no limit). A node's strategy s in it is its root's strategy s.
// Costs at or above the near-forbidden marker are summed saturating below kForbidden.
ShardingProblem group_problem(const ShardingProblem& core, const NodeGroups& groups);

// The node choice of a group choice: every member takes its strategy for its root's; a node with one
// strategy takes it.
ShardingChoice expand_groups(const ShardingProblem& core, const NodeGroups& groups, const ShardingChoice& group_choice);

// The group choice closest to a node choice: each group takes its root's strategy.
ShardingChoice restrict_to_groups(const NodeGroups& groups, const ShardingChoice& choice);

}  // namespace loom::search

#include <chrono>
#include <cstdint>
#include <optional>

namespace loom::search {

struct GroupSearchLimits {
  std::int64_t iterations = 0;  // tree moves on the group problem; 0: until the deadline
  std::optional<std::chrono::steady_clock::time_point> deadline;  // of the tree moves
  std::int64_t milp_max_cells = 0;  // the group problem goes to the MILP when it has at most this many cells
  std::int64_t milp_node_limit = 0;
  std::optional<std::chrono::steady_clock::time_point> milp_deadline;  // the MILP's; none: its node limit alone
};

// The group problem searched from `start`'s groups (tree and region moves), then solved by the MILP when
// small enough with that as incumbent; the best group choice expanded to nodes. Usage is not looked at.
ShardingChoice group_search(const ShardingProblem& core, const NodeGroups& groups, const ShardingChoice& start,
                            std::uint64_t seed, const GroupSearchLimits& limits);

}  // namespace loom::search
