// The local search of the sharding solver, on a presolved core problem. It starts from a choice of
// least usage (the solver's: first among strategies of cost below a near-forbidden 1e17, the contest
// instances' 1e18 markers; if that overflows, among all, which fits whenever any choice does, forbidden
// edge pairs aside, which it then pays a large penalty to leave) and keeps every step under the limit:
//  - best response: one node moves to its best strategy given its neighbours, if the usage profile
//    over its interval has room;
//  - chain moves: a node takes a new strategy and the neighbours tied to it by near-forbidden edge
//    costs follow (sharding_chain_move.cc);
//  - region moves: a region with cycles (where permutation-like edge tables tie nodes round a loop)
//    re-chosen by the MILP, aimed first at near-forbidden costs;
//  - tree moves (large-neighbourhood): a random tree of nodes grown around a node is re-chosen
//    exactly by dynamic programming with the rest fixed; when the exact optimum overflows the limit,
//    again with usage increases priced high (which trades near-forbidden costs for the least usage),
//    then with each node's increase bounded by its own room, then with no increase (always feasible).
// Half the moves target near-forbidden costs while any remain; the others' kinds (tree, large tree, chain,
// region) get shares that adapt to each kind's recent gain per second (sharding_move_shares.h).
// Costs are summed in 128 bits so that thousands of near-forbidden costs (1e18) cannot overflow.
// Deterministic for a seed and an iteration budget.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <random>
#include <vector>

#include "loom/search/sharding_problem.h"
#include "usage_profile.h"

namespace loom::search {

// Costs from here up mark an unwanted choice (the contest's instances use 1e18 beside the forbidden
// 2^63 - 1): the start avoids them, and tree moves target the nodes that pay them.
inline constexpr std::int64_t kNearForbidden = 100'000'000'000'000'000;

__extension__ typedef __int128 WideCost;  // a GCC/Clang extension; pedantic mode needs the marker

// What one forbidden node or edge choice costs the local search: more than any sum of allowed costs.
inline constexpr WideCost kForbiddenPenalty = WideCost{1} << 90;

struct LocalSearchLimits {
  std::int64_t iterations = 0;  // tree moves; 0: no bound
  std::optional<std::chrono::steady_clock::time_point> deadline;
  int max_tree_nodes = 48;      // a tree move's size is drawn from [2, max_tree_nodes]
  int region_nodes = 40;        // a region move's size
  int region_every = 32;        // prior share of region moves: one in this many (targeted ones: every other); 0: none
  int chain_every = 4;          // prior share of chain moves: one in this many; 0: none
  int chain_nodes = 4096;       // a chain move's largest group (a larger one is not tried)
  WideCost stop_below = 0;      // stops once the best cost is below this; 0: never
};

class LocalSearch {
 public:
  LocalSearch(const ShardingProblem& core, std::uint64_t seed);

  // Starts from `start` (its usage must fit the limit); false when it does not.
  bool start_from(const ShardingChoice& start);
  // Per node, the strategy of least usage (least cost among equals) among those costing less than
  // `cost_below` (all of them when none does).
  static ShardingChoice least_usage(const ShardingProblem& core, std::int64_t cost_below = kForbidden);
  // Nodes taken breadth-first, each picking the strategy with the fewest near-forbidden costs against
  // the neighbours already picked, then the least usage, then the least cost: edge tables that permute
  // strategies (a tensor and its consumers sharded alike) are followed instead of contradicted.
  static ShardingChoice consistent_start(const ShardingProblem& core);

  // Improves the current choice until the limits (its iterations counted from this call);
  // `report(iterations, best cost)` is called now and then.
  void run(const LocalSearchLimits& limits, const std::function<void(std::int64_t, WideCost)>& report);

  std::int64_t peak() const { return profile_.peak(); }  // the current choice's
  const ShardingChoice& best() const { return best_; }
  WideCost best_cost() const { return best_cost_; }
  // True when the best choice pays for a forbidden node or edge choice.
  bool best_forbidden() const;
  std::int64_t iterations() const { return iterations_; }  // tree and region moves, over every run
  // The current choice's cost (forbidden choices at the search's penalty).
  WideCost current_cost() const { return current_cost_; }

 private:
  struct Arc {
    int edge;
    int other;
    bool from;  // this node is the edge's `from` end
    // The edge's table and where this end's and the other end's strategies step in it, so that a cost is
    // one load: table[s * self_stride + t * other_stride] (the tree moves' dynamic program is made of these).
    const std::int64_t* table;
    std::size_t self_stride;
    std::size_t other_stride;
  };
  WideCost node_cost(int u, int s) const;
  static WideCost arc_cost(const Arc& arc, int s, int t) {
    const std::int64_t c = arc.table[static_cast<std::size_t>(s) * arc.self_stride + static_cast<std::size_t>(t) * arc.other_stride];
    return c == kForbidden ? kForbiddenPenalty : WideCost{c};
  }
  WideCost total_cost() const;
  void set(int u, int s);
  bool best_response(int u);
  std::vector<int> near_forbidden_nodes() const;
  void sweep();
  bool tree_move(int root, int size);
  // Re-chooses a region grown around `root` (cycles included) exactly by the MILP, the rest fixed and its
  // usage profile a background; in sharding_region_milp.cc.
  bool region_move(int root, int size, std::optional<std::chrono::steady_clock::time_point> deadline);
  // Node `root` takes `strategy`; each neighbour of a changed node that would then pay a near-forbidden
  // edge cost follows, taking its cheapest strategy (node cost plus that edge) avoiding it, breadth-first
  // up to `max_nodes`. Edge tables that permute strategies (a tensor and its consumers sharded alike) tie
  // such groups together, often round cycles, where tree moves (no cycles; a broken tie priced 1e18)
  // cannot move them. Kept when the cost falls and the usage fits; in sharding_chain_move.cc.
  bool chain_move(int root, int strategy, int max_nodes);
  // The cost of the nodes marked in in_tree_ and of every arc with an end among them.
  WideCost marked_cost(const std::vector<int>& nodes) const;
  // Solves the tree exactly; `allowed(u, s)` filters strategies, `surcharge(u, s)` (may be empty) adds to
  // node costs. Returns the new strategies (by order) and the optimum in `value`.
  std::optional<std::vector<int>> solve_tree(const std::vector<int>& order, const std::vector<int>& parent_arc,
                                             const std::function<bool(int, int)>& allowed,
                                             const std::function<WideCost(int, int)>& surcharge,
                                             WideCost& value) const;

  const ShardingProblem& core_;
  std::vector<std::vector<Arc>> arcs_;
  std::vector<int> free_nodes_;
  UsageProfile profile_;
  std::mt19937_64 rng_;
  ShardingChoice current_;
  WideCost current_cost_ = 0;
  ShardingChoice best_;
  WideCost best_cost_ = 0;
  std::int64_t iterations_ = 0;
  std::vector<int> in_tree_;  // scratch: tree index + 1, 0 outside
};

}  // namespace loom::search
