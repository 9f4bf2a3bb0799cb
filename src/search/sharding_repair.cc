#include "sharding_repair.h"

#include <algorithm>
#include <limits>
#include <optional>

#include "sharding_groups.h"
#include "sharding_local_search.h"
#include "usage_profile.h"

namespace loom::search {
namespace {

// A forbidden choice's cost in the repair's comparisons: above any sum of allowed costs.
constexpr double kForbiddenPrice = 1e30;

double price(std::int64_t cost) { return cost == kForbidden ? kForbiddenPrice : static_cast<double>(cost); }

// The cost of one node at a strategy with its edges against the neighbours' current strategies.
class LocalCost {
 public:
  LocalCost(const ShardingProblem& problem, const std::vector<int>& strategies)
      : problem_(problem), strategies_(strategies), arcs_(problem.nodes.size()) {
    for (std::size_t e = 0; e < problem.edges.size(); ++e) {
      const ShardingEdge& edge = problem.edges[e];
      arcs_[static_cast<std::size_t>(edge.from)].push_back(Arc{static_cast<int>(e), edge.to, true});
      arcs_[static_cast<std::size_t>(edge.to)].push_back(Arc{static_cast<int>(e), edge.from, false});
    }
  }

  double operator()(std::size_t u, int s) const {
    double cost = price(problem_.nodes[u].costs[static_cast<std::size_t>(s)]);
    for (const Arc& arc : arcs_[u]) {
      const ShardingEdge& edge = problem_.edges[static_cast<std::size_t>(arc.edge)];
      const int t = strategies_[static_cast<std::size_t>(arc.other)];
      const std::size_t kt = problem_.nodes[static_cast<std::size_t>(edge.to)].costs.size();
      const auto a = static_cast<std::size_t>(arc.from ? s : t);
      const auto b = static_cast<std::size_t>(arc.from ? t : s);
      cost += price(edge.costs[a * kt + b]);
    }
    return cost;
  }

 private:
  struct Arc {
    int edge;
    int other;
    bool from;
  };
  const ShardingProblem& problem_;
  const std::vector<int>& strategies_;  // read live: moves made by the caller are seen
  std::vector<std::vector<Arc>> arcs_;
};

// The move (node, strategy) among `live` that adds the least cost per unit of usage saved, where
// saved(u, now, s) > 0 and allowed(u, s); none when no move saves anything.
template <typename Saved, typename Allowed>
std::optional<std::pair<std::size_t, int>> cheapest_saving(const std::vector<std::size_t>& live,
                                                            const ShardingProblem& problem,
                                                            const std::vector<int>& strategies,
                                                            const LocalCost& local_cost, Saved saved,
                                                            Allowed allowed) {
  double best_ratio = std::numeric_limits<double>::infinity();
  std::optional<std::pair<std::size_t, int>> best;
  for (std::size_t u : live) {
    const int now = strategies[u];
    const double present = local_cost(u, now);
    for (int s = 0; s < static_cast<int>(problem.nodes[u].costs.size()); ++s) {
      const std::int64_t gain = saved(u, now, s);
      if (gain <= 0 || !allowed(u, s)) continue;
      const double ratio = (local_cost(u, s) - present) / static_cast<double>(gain);
      if (ratio < best_ratio) {
        best_ratio = ratio;
        best = {u, s};
      }
    }
  }
  return best;
}

// A member's usage when its group's root takes `g_strategy`.
std::int64_t member_usage(const ShardingProblem& core, const NodeGroups& groups, int u, int g_strategy) {
  const auto i = static_cast<std::size_t>(u);
  return core.nodes[i].usages[static_cast<std::size_t>(groups.follow[i][static_cast<std::size_t>(g_strategy)])];
}

// The usage profile of a group choice expanded to the nodes.
UsageProfile group_profile(const ShardingProblem& core, const NodeGroups& groups, const ShardingChoice& group_choice) {
  UsageProfile profile(core);
  for (std::size_t u = 0; u < core.nodes.size(); ++u) {
    const int g = groups.group_of[u];
    profile.add(static_cast<int>(u), g < 0 ? core.nodes[u].usages[0]
                                           : member_usage(core, groups, static_cast<int>(u),
                                                          group_choice.strategies[static_cast<std::size_t>(g)]));
  }
  return profile;
}

}  // namespace

bool repair_usage(const ShardingProblem& core, ShardingChoice& choice) {
  const std::size_t n = core.nodes.size();
  auto usage = [&](std::size_t u, int s) { return core.nodes[u].usages[static_cast<std::size_t>(s)]; };
  const LocalCost local_cost(core, choice.strategies);
  UsageProfile profile(core);
  for (std::size_t u = 0; u < n; ++u) profile.add(static_cast<int>(u), usage(u, choice.strategies[u]));
  std::vector<std::size_t> live;
  while (profile.peak() > core.usage_limit) {
    const std::int64_t t = profile.peak_time();
    live.clear();
    for (std::size_t u = 0; u < n; ++u) {
      const ShardingNode& node = core.nodes[u];
      if (node.start <= t && t < node.end && node.costs.size() > 1) live.push_back(u);
    }
    std::int64_t at_t = profile.peak();
    while (at_t > core.usage_limit) {
      const auto best = cheapest_saving(
          live, core, choice.strategies, local_cost,
          [&](std::size_t u, int now, int s) { return usage(u, now) - usage(u, s); },
          [](std::size_t, int) { return true; });
      if (!best) return false;
      const auto [u, s] = *best;
      const std::int64_t saved = usage(u, choice.strategies[u]) - usage(u, s);
      profile.add(static_cast<int>(u), -saved);
      choice.strategies[u] = s;
      at_t -= saved;
    }
  }
  return true;
}

bool repair_group_usage(const ShardingProblem& core, const NodeGroups& groups, const ShardingProblem& grouped,
                        ShardingChoice& group_choice) {
  const std::size_t count = groups.count();
  const LocalCost local_cost(grouped, group_choice.strategies);
  auto usage = [&](int u, int g_strategy) { return member_usage(core, groups, u, g_strategy); };
  UsageProfile profile = group_profile(core, groups, group_choice);
  // A group's move to s is allowed when no member's usage rises (so a fitted point stays fitted).
  auto lowers_nowhere_raises = [&](std::size_t g, int s) {
    const int now = group_choice.strategies[g];
    for (int u : groups.members[g])
      if (usage(u, s) > usage(u, now)) return false;
    return true;
  };
  while (profile.peak() > core.usage_limit) {
    const std::int64_t t = profile.peak_time();
    std::vector<std::size_t> live;
    for (std::size_t g = 0; g < count; ++g) {
      bool any = false;
      for (int u : groups.members[g]) {
        const ShardingNode& node = core.nodes[static_cast<std::size_t>(u)];
        if (node.start <= t && t < node.end) any = true;
      }
      if (any && grouped.nodes[g].costs.size() > 1) live.push_back(g);
    }
    std::vector<std::vector<std::int64_t>> used(count);
    for (std::size_t g : live) {
      used[g].assign(grouped.nodes[g].costs.size(), 0);
      for (int u : groups.members[g]) {
        const ShardingNode& node = core.nodes[static_cast<std::size_t>(u)];
        if (!(node.start <= t && t < node.end)) continue;
        for (std::size_t s = 0; s < used[g].size(); ++s) used[g][s] += usage(u, static_cast<int>(s));
      }
    }
    std::int64_t over = profile.peak() - core.usage_limit;
    while (over > 0) {
      const auto best = cheapest_saving(
          live, grouped, group_choice.strategies, local_cost,
          [&](std::size_t g, int now, int s) {
            return used[g][static_cast<std::size_t>(now)] - used[g][static_cast<std::size_t>(s)];
          },
          lowers_nowhere_raises);
      if (!best) return false;
      const auto [g, s] = *best;
      const int now = group_choice.strategies[g];
      for (int u : groups.members[g]) profile.add(u, usage(u, s) - usage(u, now));
      over -= used[g][static_cast<std::size_t>(now)] - used[g][static_cast<std::size_t>(s)];
      group_choice.strategies[g] = s;
    }
  }
  return true;
}

int improve_groups_within_limit(const ShardingProblem& core, const NodeGroups& groups, const ShardingProblem& grouped,
                                ShardingChoice& group_choice, int max_passes) {
  const std::size_t count = groups.count();
  // Exact costs (the descent must never raise the cost): a group at s with its edges against the others.
  std::vector<std::vector<std::pair<int, bool>>> arcs(count);  // (edge, this group is its `from`)
  for (std::size_t e = 0; e < grouped.edges.size(); ++e) {
    arcs[static_cast<std::size_t>(grouped.edges[e].from)].push_back({static_cast<int>(e), true});
    arcs[static_cast<std::size_t>(grouped.edges[e].to)].push_back({static_cast<int>(e), false});
  }
  auto priced = [](std::int64_t c) { return c == kForbidden ? kForbiddenPenalty : WideCost{c}; };
  auto local_cost = [&](std::size_t g, int s) {
    WideCost cost = priced(grouped.nodes[g].costs[static_cast<std::size_t>(s)]);
    for (const auto& [e, from] : arcs[g]) {
      const ShardingEdge& edge = grouped.edges[static_cast<std::size_t>(e)];
      const std::size_t kt = grouped.nodes[static_cast<std::size_t>(edge.to)].costs.size();
      const int other = group_choice.strategies[static_cast<std::size_t>(from ? edge.to : edge.from)];
      cost += priced(edge.costs[static_cast<std::size_t>(from ? s : other) * kt + static_cast<std::size_t>(from ? other : s)]);
    }
    return cost;
  };
  auto usage = [&](int u, int g_strategy) { return member_usage(core, groups, u, g_strategy); };
  UsageProfile profile = group_profile(core, groups, group_choice);
  if (profile.peak() > core.usage_limit) return 0;
  auto shift = [&](std::size_t g, int from, int to) {
    for (int u : groups.members[g])
      if (const std::int64_t d = usage(u, to) - usage(u, from); d != 0) profile.add(u, d);
  };
  int moves = 0;
  std::vector<std::pair<WideCost, int>> better;  // (cost change, strategy), most negative first
  for (int pass = 0; pass < max_passes; ++pass) {
    int moved = 0;
    for (std::size_t g = 0; g < count; ++g) {
      const int now = group_choice.strategies[g];
      const WideCost present = local_cost(g, now);
      better.clear();
      for (int s = 0; s < static_cast<int>(grouped.nodes[g].costs.size()); ++s)
        if (s != now)
          if (const WideCost change = local_cost(g, s) - present; change < 0) better.push_back({change, s});
      std::sort(better.begin(), better.end());
      for (const auto& [change, s] : better) {
        shift(g, now, s);
        if (profile.peak() <= core.usage_limit) {
          group_choice.strategies[g] = s;
          ++moved;
          break;
        }
        shift(g, s, now);
      }
    }
    moves += moved;
    if (moved == 0) break;
  }
  return moves;
}

}  // namespace loom::search
