#include "loom/search/sharding_problem.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

namespace loom::search {
namespace {

std::string node_label(const ShardingProblem& problem, std::size_t i) {
  const std::string& name = problem.nodes[i].name;
  return name.empty() ? fmt::format("node {}", i) : fmt::format("node {} ('{}')", i, name);
}

}  // namespace

Expected<void> check_problem(const ShardingProblem& problem) {
  const std::string where = problem.name.empty() ? "sharding problem" : fmt::format("problem '{}'", problem.name);
  for (std::size_t i = 0; i < problem.nodes.size(); ++i) {
    const ShardingNode& node = problem.nodes[i];
    if (node.costs.empty()) return fail(fmt::format("{}: {} has no strategies", where, node_label(problem, i)));
    if (node.usages.size() != node.costs.size())
      return fail(fmt::format("{}: {} has {} costs but {} usages", where, node_label(problem, i), node.costs.size(),
                              node.usages.size()),
                  "give one cost and one usage per strategy");
    if (node.end < node.start)
      return fail(fmt::format("{}: {} has the interval [{}, {}), which ends before it starts", where,
                              node_label(problem, i), node.start, node.end));
  }
  const auto n = static_cast<int>(problem.nodes.size());
  for (std::size_t e = 0; e < problem.edges.size(); ++e) {
    const ShardingEdge& edge = problem.edges[e];
    if (edge.from < 0 || edge.from >= n || edge.to < 0 || edge.to >= n)
      return fail(fmt::format("{}: edge {} joins nodes {} and {}, but there are {} nodes", where, e, edge.from, edge.to,
                              n));
    const std::size_t cells = problem.nodes[static_cast<std::size_t>(edge.from)].costs.size() *
                              problem.nodes[static_cast<std::size_t>(edge.to)].costs.size();
    if (edge.costs.size() != cells)
      return fail(fmt::format("{}: edge {} ({} -> {}) has {} costs, but its ends' strategies make {}", where, e,
                              edge.from, edge.to, edge.costs.size(), cells),
                  "give one cost per pair of strategies, row-major by the first node's strategy");
  }
  return {};
}

std::int64_t edge_cost(const ShardingProblem& problem, const ShardingEdge& edge, const ShardingChoice& choice) {
  const std::size_t to_count = problem.nodes[static_cast<std::size_t>(edge.to)].costs.size();
  return edge.costs[static_cast<std::size_t>(choice.strategies[static_cast<std::size_t>(edge.from)]) * to_count +
                    static_cast<std::size_t>(choice.strategies[static_cast<std::size_t>(edge.to)])];
}

std::int64_t choice_cost_sum(const ShardingProblem& problem, const ShardingChoice& choice) {
  std::int64_t total = 0;
  for (std::size_t i = 0; i < problem.nodes.size(); ++i)
    total = add_costs(total, problem.nodes[i].costs[static_cast<std::size_t>(choice.strategies[i])]);
  for (const ShardingEdge& edge : problem.edges) total = add_costs(total, edge_cost(problem, edge, choice));
  return total;
}

Expected<ChoiceCost> evaluate_choice(const ShardingProblem& problem, const ShardingChoice& choice) {
  if (choice.strategies.size() != problem.nodes.size())
    return fail(fmt::format("the choice has {} strategies for {} nodes", choice.strategies.size(),
                            problem.nodes.size()));
  ChoiceCost cost;
  std::vector<std::pair<std::int64_t, std::int64_t>> events;  // (time, usage change); ends sort before starts
  for (std::size_t i = 0; i < problem.nodes.size(); ++i) {
    const ShardingNode& node = problem.nodes[i];
    const int s = choice.strategies[i];
    if (s < 0 || static_cast<std::size_t>(s) >= node.costs.size())
      return fail(fmt::format("{}: strategy {} is out of range (it has {})", node_label(problem, i), s,
                              node.costs.size()));
    const auto k = static_cast<std::size_t>(s);
    if (node.costs[k] == kForbidden || node.usages[k] == kForbidden)
      return fail(fmt::format("{}: strategy {} is forbidden", node_label(problem, i), s));
    if (node.start < node.end && node.usages[k] != 0) {
      events.emplace_back(node.start, node.usages[k]);
      events.emplace_back(node.end, -node.usages[k]);
    }
  }
  for (std::size_t e = 0; e < problem.edges.size(); ++e) {
    const ShardingEdge& edge = problem.edges[e];
    if (edge_cost(problem, edge, choice) == kForbidden)
      return fail(fmt::format("edge {} ({} -> {}): the pair of strategies ({}, {}) is forbidden", e, edge.from, edge.to,
                              choice.strategies[static_cast<std::size_t>(edge.from)],
                              choice.strategies[static_cast<std::size_t>(edge.to)]));
  }
  cost.total = choice_cost_sum(problem, choice);
  std::sort(events.begin(), events.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first < b.first : a.second < b.second;
  });
  std::int64_t live = 0;
  for (const auto& [time, change] : events) {
    live += change;
    if (live > cost.peak_usage) {
      cost.peak_usage = live;
      cost.peak_time = time;
    }
  }
  if (cost.peak_usage > problem.usage_limit)
    return fail(fmt::format("the choice uses {} at time {}, over the limit of {}", cost.peak_usage, cost.peak_time,
                            problem.usage_limit));
  return cost;
}

}  // namespace loom::search
