// The local search's chain move (sharding_local_search.h): one node takes a new strategy and the
// neighbours it would then tie to a near-forbidden edge cost follow it, breadth-first.
#include "sharding_local_search.h"

namespace loom::search {

bool LocalSearch::chain_move(int root, int strategy, int max_nodes) {
  const auto near = WideCost{kNearForbidden};
  std::vector<int> group{root};
  std::vector<int> chosen{strategy};
  in_tree_[static_cast<std::size_t>(root)] = 1;
  bool complete = true;
  for (std::size_t head = 0; head < group.size() && complete; ++head) {
    const int su = chosen[head];
    for (const Arc& arc : arcs_[static_cast<std::size_t>(group[head])]) {
      const auto v = static_cast<std::size_t>(arc.other);
      // A neighbour already in the group keeps its choice (a clash shows in the cost); one with a single
      // strategy cannot follow.
      if (in_tree_[v] || core_.nodes[v].costs.size() < 2 || arc_cost(arc, su, current_.strategies[v]) < near) continue;
      if (static_cast<int>(group.size()) >= max_nodes) {
        complete = false;
        break;
      }
      int follow = -1;
      WideCost follow_cost = 0;
      for (int t = 0; t < static_cast<int>(core_.nodes[v].costs.size()); ++t) {
        const WideCost tie = arc_cost(arc, su, t);
        if (tie >= near) continue;
        const WideCost c = tie + node_cost(arc.other, t);
        if (follow < 0 || c < follow_cost) {
          follow = t;
          follow_cost = c;
        }
      }
      if (follow < 0) continue;
      group.push_back(arc.other);
      chosen.push_back(follow);
      in_tree_[v] = static_cast<int>(group.size());
    }
  }
  bool moved = false;
  if (complete) {
    const WideCost present = marked_cost(group);
    std::vector<int> before(group.size());
    for (std::size_t i = 0; i < group.size(); ++i) {
      before[i] = current_.strategies[static_cast<std::size_t>(group[i])];
      set(group[i], chosen[i]);
    }
    const WideCost after = marked_cost(group);
    if (after < present && profile_.peak() <= core_.usage_limit) {
      current_cost_ += after - present;
      moved = true;
    } else {
      for (std::size_t i = 0; i < group.size(); ++i) set(group[i], before[i]);
    }
  }
  for (int u : group) in_tree_[static_cast<std::size_t>(u)] = 0;
  return moved;
}

}  // namespace loom::search
