#include "sharding_repair.h"

#include <limits>
#include <optional>

#include "usage_profile.h"

namespace loom::search {
namespace {

// A forbidden choice's cost in the repair's comparisons: above any sum of allowed costs.
constexpr double kForbiddenPrice = 1e30;

double price(std::int64_t cost) { return cost == kForbidden ? kForbiddenPrice : static_cast<double>(cost); }

struct Arc {
  int edge;
  int other;
  bool from;
};

}  // namespace

bool repair_usage(const ShardingProblem& core, ShardingChoice& choice) {
  const std::size_t n = core.nodes.size();
  std::vector<std::vector<Arc>> arcs(n);
  for (std::size_t e = 0; e < core.edges.size(); ++e) {
    const ShardingEdge& edge = core.edges[e];
    arcs[static_cast<std::size_t>(edge.from)].push_back(Arc{static_cast<int>(e), edge.to, true});
    arcs[static_cast<std::size_t>(edge.to)].push_back(Arc{static_cast<int>(e), edge.from, false});
  }
  auto usage = [&](std::size_t u, int s) { return core.nodes[u].usages[static_cast<std::size_t>(s)]; };
  // The cost of node u at strategy s with its edges against the current neighbours.
  auto local_cost = [&](std::size_t u, int s) {
    double cost = price(core.nodes[u].costs[static_cast<std::size_t>(s)]);
    for (const Arc& arc : arcs[u]) {
      const ShardingEdge& edge = core.edges[static_cast<std::size_t>(arc.edge)];
      const int t = choice.strategies[static_cast<std::size_t>(arc.other)];
      const std::size_t kt = core.nodes[static_cast<std::size_t>(edge.to)].costs.size();
      const auto a = static_cast<std::size_t>(arc.from ? s : t);
      const auto b = static_cast<std::size_t>(arc.from ? t : s);
      cost += price(edge.costs[a * kt + b]);
    }
    return cost;
  };
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
      double best_ratio = std::numeric_limits<double>::infinity();
      std::optional<std::pair<std::size_t, int>> best;
      for (std::size_t u : live) {
        const int now = choice.strategies[u];
        const double present = local_cost(u, now);
        for (int s = 0; s < static_cast<int>(core.nodes[u].costs.size()); ++s) {
          const std::int64_t saved = usage(u, now) - usage(u, s);
          if (saved <= 0) continue;
          const double ratio = (local_cost(u, s) - present) / static_cast<double>(saved);
          if (ratio < best_ratio) {
            best_ratio = ratio;
            best = {u, s};
          }
        }
      }
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

}  // namespace loom::search
