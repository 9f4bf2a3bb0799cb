// The local search's region move: a connected region around a node, cycles included, re-chosen
// exactly by the MILP (sharding_milp.h) with every other node fixed. The sub-problem holds the region's
// nodes (their costs plus their arcs to fixed nodes), the edges inside it, and one fixed "background"
// node per stretch of time between the region's interval ends, whose usage is the most the rest of the
// profile uses there: so any choice the MILP returns fits the limit.
#include <algorithm>

#include "sharding_local_search.h"
#include "sharding_milp.h"
#include "sharding_presolve.h"

namespace loom::search {
namespace {

// CBC's branch-and-bound nodes per region: regions are small, their LP relaxations mostly integral.
constexpr std::int64_t kRegionNodeLimit = 50;
// A region stops growing at this many strategies plus edge cells: wide nodes (over 100 strategies) would
// otherwise make one LP take seconds.
constexpr std::int64_t kRegionCells = 6'000;
// A near-forbidden cost enters the region's MILP as this much: above every ordinary cost of the contest's
// instances (up to about 1e13), small enough that sums of a hundred stay exact in CBC's doubles. The
// move is then accepted on the exact cost.
constexpr std::int64_t kRegionMarker = 100'000'000'000'000;

std::int64_t for_region(std::int64_t cost) {
  return cost != kForbidden && cost >= kNearForbidden ? kRegionMarker : cost;
}

}  // namespace

WideCost LocalSearch::marked_cost(const std::vector<int>& nodes) const {
  WideCost cost = 0;
  for (int u : nodes) {
    const int s = current_.strategies[static_cast<std::size_t>(u)];
    cost += node_cost(u, s);
    for (const Arc& arc : arcs_[static_cast<std::size_t>(u)]) {
      const int t = current_.strategies[static_cast<std::size_t>(arc.other)];
      if (!in_tree_[static_cast<std::size_t>(arc.other)] || arc.from) cost += arc_cost(arc, s, t);
    }
  }
  return cost;
}

bool LocalSearch::region_move(int root, int size, std::optional<std::chrono::steady_clock::time_point> deadline) {
  std::vector<int> region{root};
  in_tree_[static_cast<std::size_t>(root)] = 1;
  auto k = [&](std::size_t u) { return static_cast<std::int64_t>(core_.nodes[u].costs.size()); };
  std::int64_t cells = k(static_cast<std::size_t>(root));
  for (std::size_t head = 0; head < region.size() && static_cast<int>(region.size()) < size; ++head) {
    const auto& arcs = arcs_[static_cast<std::size_t>(region[head])];
    const std::size_t offset = arcs.empty() ? 0 : rng_() % arcs.size();
    for (std::size_t j = 0; j < arcs.size() && static_cast<int>(region.size()) < size; ++j) {
      const auto w = static_cast<std::size_t>(arcs[(j + offset) % arcs.size()].other);
      if (in_tree_[w] || core_.nodes[w].costs.size() < 2) continue;
      std::int64_t added = k(w);
      for (const Arc& arc : arcs_[w])
        if (in_tree_[static_cast<std::size_t>(arc.other)]) added += k(w) * k(static_cast<std::size_t>(arc.other));
      if (cells + added > kRegionCells) continue;
      cells += added;
      region.push_back(static_cast<int>(w));
      in_tree_[w] = static_cast<int>(region.size());
    }
  }
  ShardingProblem sub;
  sub.usage_limit = core_.usage_limit;
  ShardingChoice incumbent;
  std::vector<std::int64_t> ends;
  for (int u : region) {
    const ShardingNode& node = core_.nodes[static_cast<std::size_t>(u)];
    ShardingNode copy{"", node.start, node.end, node.costs, node.usages};
    for (std::int64_t& c : copy.costs) c = for_region(c);
    for (const Arc& arc : arcs_[static_cast<std::size_t>(u)]) {
      const auto v = static_cast<std::size_t>(arc.other);
      if (in_tree_[v]) {
        if (arc.from) {
          const ShardingEdge& edge = core_.edges[static_cast<std::size_t>(arc.edge)];
          sub.edges.push_back({in_tree_[static_cast<std::size_t>(u)] - 1, in_tree_[v] - 1, edge.costs});
          for (std::int64_t& c : sub.edges.back().costs) c = for_region(c);
        }
        continue;
      }
      for (std::size_t s = 0; s < copy.costs.size(); ++s) {
        const WideCost c = arc_cost(arc, static_cast<int>(s), current_.strategies[v]);
        copy.costs[s] = c >= WideCost{kForbidden} ? kForbidden : add_costs(copy.costs[s], for_region(static_cast<std::int64_t>(c)));
      }
    }
    sub.nodes.push_back(std::move(copy));
    incumbent.strategies.push_back(current_.strategies[static_cast<std::size_t>(u)]);
    if (node.start < node.end) {
      ends.push_back(node.start);
      ends.push_back(node.end);
    }
  }
  std::sort(ends.begin(), ends.end());
  ends.erase(std::unique(ends.begin(), ends.end()), ends.end());
  for (std::size_t i = 0; i + 1 < ends.size(); ++i) {
    const auto most = profile_.max_between(ends[i], ends[i + 1]);
    if (!most) continue;
    std::int64_t own = 0;  // the region's usage there, constant over the stretch
    for (int u : region) {
      const ShardingNode& node = core_.nodes[static_cast<std::size_t>(u)];
      if (node.start <= ends[i] && ends[i] < node.end)
        own += node.usages[static_cast<std::size_t>(current_.strategies[static_cast<std::size_t>(u)])];
    }
    sub.nodes.push_back({"", ends[i], ends[i + 1], {0}, {*most - own}});
    incumbent.strategies.push_back(0);
  }

  bool moved = false;
  // Under a deadline CBC gets at most the time left (a second at most); without one, its node limit alone
  // bounds it, so an iteration budget stays deterministic.
  double seconds = 0;
  if (deadline)
    seconds = std::clamp(std::chrono::duration<double>(*deadline - std::chrono::steady_clock::now()).count(), 0.01, 1.0);
  const MilpOutcome outcome = solve_milp(sub, &incumbent, kRegionNodeLimit, seconds);
  if (outcome.choice && outcome.choice->strategies != incumbent.strategies) {
    const WideCost present = marked_cost(region);
    for (std::size_t i = 0; i < region.size(); ++i) set(region[i], outcome.choice->strategies[i]);
    const WideCost after = marked_cost(region);
    if (after <= present && profile_.peak() <= core_.usage_limit) {
      current_cost_ += after - present;
      moved = after < present;
    } else {
      for (std::size_t i = 0; i < region.size(); ++i) set(region[i], incumbent.strategies[i]);
    }
  }
  for (int u : region) in_tree_[static_cast<std::size_t>(u)] = 0;
  return moved;
}

}  // namespace loom::search
