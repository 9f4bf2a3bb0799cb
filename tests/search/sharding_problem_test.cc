#include "loom/search/sharding_problem.h"

#include <gtest/gtest.h>

#include <random>

namespace loom::search {
namespace {

// The contest's example (../shared/benchmarks/iopddl/example.json).
ShardingProblem example() {
  ShardingProblem p;
  p.name = "example";
  p.nodes = {{"", 30, 70, {15}, {10}},
             {"", 40, 70, {55, 65}, {25, 25}},
             {"", 50, 120, {25, 45, 35}, {15, 20, 15}},
             {"", 110, 140, {85, 75}, {10, 10}},
             {"", 110, 150, {95}, {15}}};
  p.edges = {{0, 1, {30, 40}},
             {0, 2, {50, 10, 40}},
             {1, 3, {90, 10, 20, 80}},
             {2, 4, {60, 20, 30}},
             {3, 4, {70, 60}}};
  p.usage_limit = 50;
  return p;
}

TEST(ShardingProblem, EvaluatesNodeAndEdgeCostsAndThePeakUsage) {
  // Strategies (0, 0, 0, 1, 0): nodes 15+55+25+75+95, edges 30+50+10+60+60.
  const Expected<ChoiceCost> cost = evaluate_choice(example(), {{0, 0, 0, 1, 0}});
  ASSERT_TRUE(cost.has_value()) << cost.error().to_string();
  EXPECT_EQ(cost->total, 265 + 210);
  EXPECT_EQ(cost->peak_usage, 10 + 25 + 15);  // nodes 0-2 live over [50, 70)
  EXPECT_EQ(cost->peak_time, 50);
}

TEST(ShardingProblem, RefusesAChoiceOverTheUsageLimitNamingTheTime) {
  ShardingProblem p = example();
  p.usage_limit = 54;
  const Expected<ChoiceCost> cost = evaluate_choice(p, {{0, 0, 1, 1, 0}});
  ASSERT_FALSE(cost.has_value());
  EXPECT_NE(cost.error().message.find("uses 55 at time 50"), std::string::npos) << cost.error().message;
  EXPECT_TRUE(evaluate_choice(p, {{0, 0, 0, 1, 0}}).has_value());  // 10 + 25 + 15
}

TEST(ShardingProblem, IntervalsEndingWhereOthersStartDoNotOverlap) {
  ShardingProblem p;
  p.nodes = {{"a", 0, 10, {1}, {30}}, {"b", 10, 20, {1}, {30}}};
  p.usage_limit = 30;
  const Expected<ChoiceCost> cost = evaluate_choice(p, {{0, 0}});
  ASSERT_TRUE(cost.has_value()) << cost.error().to_string();
  EXPECT_EQ(cost->peak_usage, 30);
}

TEST(ShardingProblem, RefusesForbiddenChoicesAndBadShapes) {
  ShardingProblem p = example();
  p.edges[1].costs[2] = kForbidden;
  const Expected<ChoiceCost> forbidden_edge = evaluate_choice(p, {{0, 0, 2, 1, 0}});
  ASSERT_FALSE(forbidden_edge.has_value());
  EXPECT_NE(forbidden_edge.error().message.find("edge 1"), std::string::npos);
  p.nodes[1].costs[1] = kForbidden;
  EXPECT_FALSE(evaluate_choice(p, {{0, 1, 0, 1, 0}}).has_value());
  EXPECT_FALSE(evaluate_choice(p, {{0, 0, 3, 1, 0}}).has_value());  // out of range
  EXPECT_FALSE(evaluate_choice(p, {{0, 0}}).has_value());           // wrong length

  EXPECT_TRUE(check_problem(example()).has_value());
  ShardingProblem bad = example();
  bad.edges[2].costs.pop_back();
  const Expected<void> checked = check_problem(bad);
  ASSERT_FALSE(checked.has_value());
  EXPECT_NE(checked.error().message.find("edge 2 (1 -> 3) has 3 costs, but its ends' strategies make 4"),
            std::string::npos)
      << checked.error().message;
  bad = example();
  bad.nodes[2].usages.pop_back();
  EXPECT_FALSE(check_problem(bad).has_value());
  bad = example();
  bad.edges[0].to = 9;
  EXPECT_FALSE(check_problem(bad).has_value());
}

// A random problem of up to 12 nodes (1-4 strategies, some forbidden; costs of 3e18, so that sums saturate) and
// edges between random pairs, with a random usage limit.
ShardingProblem random_problem(std::mt19937_64& rng) {
  ShardingProblem p;
  const auto cost = [&] {
    const std::uint64_t r = rng() % 20;
    return r == 0 ? kForbidden : r < 5 ? std::int64_t{3'000'000'000'000'000'000} : static_cast<std::int64_t>(rng() % 1000);
  };
  const int n = 1 + static_cast<int>(rng() % 12);
  for (int i = 0; i < n; ++i) {
    ShardingNode node;
    node.start = static_cast<std::int64_t>(rng() % 10);
    node.end = node.start + static_cast<std::int64_t>(rng() % 5);
    for (std::uint64_t s = 0, k = 1 + rng() % 4; s < k; ++s) {
      node.costs.push_back(cost());
      node.usages.push_back(static_cast<std::int64_t>(rng() % 10));
    }
    p.nodes.push_back(std::move(node));
  }
  for (std::uint64_t e = 0, m = rng() % 20; e < m; ++e) {
    ShardingEdge edge{static_cast<int>(rng() % static_cast<std::uint64_t>(n)), static_cast<int>(rng() % static_cast<std::uint64_t>(n)), {}};
    edge.costs.resize(p.nodes[static_cast<std::size_t>(edge.from)].costs.size() *
                      p.nodes[static_cast<std::size_t>(edge.to)].costs.size());
    for (std::int64_t& c : edge.costs) c = cost();
    p.edges.push_back(std::move(edge));
  }
  p.usage_limit = static_cast<std::int64_t>(rng() % 40);
  return p;
}

TEST(ShardingProblem, ChoiceCostSumIsTheEvaluatorsTotalOnEveryChoiceItAccepts) {
  std::mt19937_64 rng(7);
  int accepted = 0, saturated = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    const ShardingProblem p = random_problem(rng);
    ASSERT_TRUE(check_problem(p).has_value());
    ShardingChoice choice;
    for (const ShardingNode& node : p.nodes) choice.strategies.push_back(static_cast<int>(rng() % node.costs.size()));
    const Expected<ChoiceCost> cost = evaluate_choice(p, choice);
    if (!cost) continue;
    ++accepted;
    saturated += cost->total == kForbidden;
    EXPECT_EQ(choice_cost_sum(p, choice), cost->total) << "trial " << trial;
  }
  EXPECT_GT(accepted, 300);  // the law was checked often, on sums that saturate too
  EXPECT_GT(saturated, 10);
}

TEST(ShardingProblem, ChoiceCostSumLooksAtNeitherTheLimitNorForbiddenCosts) {
  ShardingProblem p = example();
  p.usage_limit = 1;
  EXPECT_FALSE(evaluate_choice(p, {{0, 0, 0, 1, 0}}).has_value());
  EXPECT_EQ(choice_cost_sum(p, {{0, 0, 0, 1, 0}}), 265 + 210);
  p.edges[0].costs[0] = kForbidden;
  EXPECT_EQ(edge_cost(p, p.edges[0], {{0, 0, 0, 1, 0}}), kForbidden);
  EXPECT_EQ(choice_cost_sum(p, {{0, 0, 0, 1, 0}}), kForbidden);
}

}  // namespace
}  // namespace loom::search
