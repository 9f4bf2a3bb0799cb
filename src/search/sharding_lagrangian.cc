#include "sharding_lagrangian.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "sharding_repair.h"

namespace loom::search {
namespace {

// Rounds without a better L before theta halves.
constexpr int kPatience = 3;
// The step's gap never falls below this share of U (the inner search is heuristic, so L may pass U).
constexpr double kLeastGap = 0.01;
// A round's choice is repaired only when its peak is at most this many times the limit: a choice far
// over it (the first rounds') repairs slowly and into a poor choice.
constexpr double kRepairReach = 1.3;
// Tree moves of a round and of a polish, as a share of the free nodes, unless the limits say otherwise.
constexpr std::int64_t kMovesDivisor = 16;
// Tree and region moves of a round's search over groups: 4 per group, at most a node round's, at least 200.
constexpr std::int64_t kMovesPerGroup = 4;
constexpr std::int64_t kLeastGroupMoves = 200;
// Passes after the first draw their seeds this far apart (a pass uses seed, seed + 1 and seed + round).
constexpr std::uint64_t kPassSeedStep = 1000;

// Per node, its time points [first, last) among the distinct starts of live nodes (as UsageProfile's).
struct Points {
  std::vector<std::size_t> first, last;
  std::size_t count = 0;
};

Points points_of(const ShardingProblem& core) {
  std::vector<std::int64_t> starts;
  for (const ShardingNode& n : core.nodes)
    if (n.start < n.end) starts.push_back(n.start);
  std::sort(starts.begin(), starts.end());
  starts.erase(std::unique(starts.begin(), starts.end()), starts.end());
  Points points;
  points.count = starts.size();
  for (const ShardingNode& n : core.nodes) {
    const auto at = [&](std::int64_t t) {
      return static_cast<std::size_t>(std::lower_bound(starts.begin(), starts.end(), t) - starts.begin());
    };
    points.first.push_back(at(n.start));
    points.last.push_back(n.start < n.end ? at(n.end) : at(n.start));
  }
  return points;
}

std::vector<std::int64_t> usage_by_point(const ShardingProblem& core, const Points& points, const ShardingChoice& choice) {
  std::vector<std::int64_t> usage(points.count + 1, 0);
  for (std::size_t u = 0; u < core.nodes.size(); ++u) {
    if (points.first[u] >= points.last[u]) continue;
    const std::int64_t m = core.nodes[u].usages[static_cast<std::size_t>(choice.strategies[u])];
    usage[points.first[u]] += m;
    usage[points.last[u]] -= m;
  }
  std::int64_t running = 0;
  for (std::int64_t& x : usage) x = running += x;
  usage.pop_back();
  return usage;
}

// Node costs plus usage priced by the multipliers over each node's points; near-forbidden costs stay.
void price_nodes(const ShardingProblem& core, const Points& points, const std::vector<double>& lambda,
                 ShardingProblem& priced) {
  std::vector<double> prefix(points.count + 1, 0);
  for (std::size_t p = 0; p < points.count; ++p) prefix[p + 1] = prefix[p] + lambda[p];
  constexpr auto kCap = static_cast<double>(kNearForbidden - 1);
  for (std::size_t u = 0; u < core.nodes.size(); ++u) {
    const ShardingNode& node = core.nodes[u];
    const double weight = prefix[points.last[u]] - prefix[points.first[u]];
    for (std::size_t s = 0; s < node.costs.size(); ++s) {
      if (node.costs[s] >= kNearForbidden) continue;
      const double c = static_cast<double>(node.costs[s]) + weight * static_cast<double>(node.usages[s]);
      priced.nodes[u].costs[s] = static_cast<std::int64_t>(std::min(std::round(c), kCap));
    }
  }
}

}  // namespace

LagrangianOutcome lagrangian_search(const ShardingProblem& core, const ShardingChoice& start, std::uint64_t seed,
                                    const LagrangianLimits& limits) {
  LagrangianOutcome out;
  LocalSearch first(core, seed);
  first.start_from(start);
  out.best = start;
  out.cost = first.best_cost();
  std::int64_t free_nodes = 0;
  for (const ShardingNode& n : core.nodes) free_nodes += n.costs.size() > 1;
  if (free_nodes == 0) return out;
  LocalSearchLimits inner;
  inner.iterations = limits.moves_per_round > 0 ? limits.moves_per_round : std::max<std::int64_t>(1, free_nodes / kMovesDivisor);
  inner.deadline = limits.deadline;
  inner.region_every = 0;  // the MILP's region moves cost more than the rounds can afford
  LocalSearchLimits polish = inner;
  polish.iterations = limits.polish_moves > 0 ? limits.polish_moves : std::max<std::int64_t>(1, free_nodes / kMovesDivisor);

  const Points points = points_of(core);
  ShardingProblem priced = core;
  priced.usage_limit = kForbidden;
  std::vector<double> lambda(points.count, 0);
  ShardingChoice current = start;
  double theta = 1;
  double best_bound = -std::numeric_limits<double>::infinity();
  int stale = 0;
  const auto limit = static_cast<double>(core.usage_limit);
  // One search on the prices (which change in place between rounds) and one under the limit, kept
  // across rounds: building them costs as much as a short round on the contest's sizes.
  LocalSearch search(priced, seed);
  LocalSearch limited(core, seed + 1);
  // With groups: the unpriced group problem (the group repair's prices) and the group search's moves.
  const ShardingProblem unpriced_groups = limits.groups ? group_problem(core, *limits.groups) : ShardingProblem{};
  LocalSearchLimits group_moves;
  group_moves.iterations =
      std::max(kLeastGroupMoves, std::min(inner.iterations, kMovesPerGroup * static_cast<std::int64_t>(limits.groups ? limits.groups->count() : 0)));
  group_moves.deadline = limits.deadline;
  for (int round = 0; round < limits.rounds; ++round) {
    if (limits.deadline && std::chrono::steady_clock::now() >= *limits.deadline) break;
    ++out.rounds;
    price_nodes(core, points, lambda, priced);
    std::optional<ShardingChoice> group_choice;  // the round's choice over the groups, when searched so
    if (limits.groups) {
      const ShardingProblem priced_groups = group_problem(priced, *limits.groups);
      LocalSearch grouped(priced_groups, seed + static_cast<std::uint64_t>(round));
      grouped.start_from(restrict_to_groups(*limits.groups, current));
      const std::int64_t moves_before = grouped.iterations();
      grouped.run(group_moves, {});
      out.iterations += grouped.iterations() - moves_before;
      group_choice = grouped.best();
      current = expand_groups(core, *limits.groups, *group_choice);
    } else {
      search.start_from(current);
      const std::int64_t moves_before = search.iterations();
      search.run(inner, {});
      out.iterations += search.iterations() - moves_before;
      current = search.best();
    }

    // The choice's own cost (for the bound), then the upper bound: the choice repaired under the limit
    // and polished.
    limited.start_from(current);
    const WideCost current_cost = limited.current_cost();
    const std::vector<std::int64_t> usage = usage_by_point(core, points, current);
    const std::int64_t peak = usage.empty() ? 0 : *std::max_element(usage.begin(), usage.end());
    ShardingChoice fitted = current;
    bool fits = false;
    if (static_cast<double>(peak) <= kRepairReach * static_cast<double>(core.usage_limit)) {
      if (group_choice && repair_group_usage(core, *limits.groups, unpriced_groups, *group_choice)) {
        improve_groups_within_limit(core, *limits.groups, unpriced_groups, *group_choice);
        fitted = expand_groups(core, *limits.groups, *group_choice);
        fits = true;
      } else {
        fits = repair_usage(core, fitted);
      }
    }
    if (fits && limited.start_from(fitted)) {
      const std::int64_t polish_before = limited.iterations();
      limited.run(polish, {});
      out.iterations += limited.iterations() - polish_before;
      if (limited.best_cost() < out.cost) {
        out.cost = limited.best_cost();
        out.best = limited.best();
      }
    }

    // The lower bound estimate and the subgradient step.
    double slack_priced = 0, norm = 0;
    for (std::size_t p = 0; p < points.count; ++p) {
      const double g = static_cast<double>(usage[p]) - limit;
      slack_priced += lambda[p] * g;
      if (lambda[p] > 0 || g > 0) norm += g * g;
    }
    const double bound = static_cast<double>(current_cost) + slack_priced;
    if (bound > best_bound) {
      best_bound = bound;
      stale = 0;
    } else if (++stale >= kPatience) {
      theta /= 2;
      stale = 0;
    }
    if (norm == 0) continue;
    const double upper = static_cast<double>(out.cost);
    const double step = theta * std::max(upper - bound, kLeastGap * upper) / norm;
    for (std::size_t p = 0; p < points.count; ++p)
      lambda[p] = std::max(0.0, lambda[p] + step * (static_cast<double>(usage[p]) - limit));
  }
  return out;
}

LagrangianOutcome lagrangian_passes(const ShardingProblem& core, const ShardingChoice& start, std::uint64_t seed,
                                    const LagrangianLimits& limits) {
  using Clock = std::chrono::steady_clock;
  Clock::time_point began = Clock::now();
  LagrangianOutcome out = lagrangian_search(core, start, seed, limits);
  if (!limits.deadline) return out;
  for (std::uint64_t pass = 1; out.rounds == limits.rounds * static_cast<int>(pass); ++pass) {
    const Clock::time_point now = Clock::now();
    if (now + (now - began) > *limits.deadline) break;  // another pass as long as the last would be cut
    began = now;
    LagrangianOutcome again = lagrangian_search(core, out.best, seed + kPassSeedStep * pass, limits);
    out.iterations += again.iterations;
    out.rounds += again.rounds;
    if (again.cost < out.cost) {
      out.cost = again.cost;
      out.best = std::move(again.best);
    }
  }
  return out;
}

}  // namespace loom::search
