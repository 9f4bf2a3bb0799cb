#include "loom/search/sharding_solver.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <random>

#include "../../src/search/sharding_local_search.h"

namespace loom::search {
namespace {

// A random small problem: parallel edges, forbidden entries and (mostly) a usage limit between the
// least and the largest possible peak, so that some cases bind and a few are infeasible.
ShardingProblem random_problem(std::mt19937_64& rng) {
  auto draw = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  ShardingProblem p;
  const int n = draw(1, 7);
  for (int i = 0; i < n; ++i) {
    ShardingNode node;
    node.start = draw(0, 8);
    node.end = node.start + draw(0, 4);
    const int k = draw(1, 3);
    for (int s = 0; s < k; ++s) {
      node.costs.push_back(draw(0, 19) == 0 ? kForbidden : draw(0, 50));
      node.usages.push_back(draw(0, 29) == 0 ? kForbidden : draw(0, 10));
    }
    p.nodes.push_back(node);
  }
  const int m = draw(0, n + 3);
  for (int e = 0; e < m && n > 1; ++e) {
    ShardingEdge edge;
    edge.from = draw(0, n - 1);
    do edge.to = draw(0, n - 1); while (edge.to == edge.from);
    const std::size_t cells = p.nodes[static_cast<std::size_t>(edge.from)].costs.size() *
                              p.nodes[static_cast<std::size_t>(edge.to)].costs.size();
    for (std::size_t c = 0; c < cells; ++c) edge.costs.push_back(draw(0, 14) == 0 ? kForbidden : draw(0, 40));
    p.edges.push_back(edge);
  }
  p.usage_limit = draw(0, 4) == 0 ? kForbidden : draw(0, 25);
  return p;
}

// The optimum by enumerating every choice, or nullopt when none passes the evaluator.
std::optional<std::int64_t> exhaustive_optimum(const ShardingProblem& p) {
  ShardingChoice choice{std::vector<int>(p.nodes.size(), 0)};
  std::optional<std::int64_t> best;
  for (;;) {
    if (auto cost = evaluate_choice(p, choice); cost && (!best || cost->total < *best)) best = cost->total;
    std::size_t i = 0;
    while (i < p.nodes.size() && ++choice.strategies[i] == static_cast<int>(p.nodes[i].costs.size()))
      choice.strategies[i++] = 0;
    if (i == p.nodes.size()) return best;
  }
}

SolveOptions budget(std::int64_t iterations) {
  SolveOptions options;
  options.iterations = iterations;
  return options;
}

TEST(SolveSharding, FindsTheExhaustiveOptimumOnRandomSmallProblems) {
  std::mt19937_64 rng(15);
  int feasible = 0, infeasible = 0, binding = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const ShardingProblem p = random_problem(rng);
    const std::optional<std::int64_t> optimum = exhaustive_optimum(p);
    const Expected<ShardingResult> result = solve_sharding(p, budget(200));
    if (!optimum) {
      EXPECT_FALSE(result.has_value()) << "trial " << trial << ": no choice is feasible, but the solver found one";
      ++infeasible;
      continue;
    }
    ASSERT_TRUE(result.has_value()) << "trial " << trial << ": " << result.error().to_string();
    ++feasible;
    EXPECT_EQ(result->cost.total, *optimum) << "trial " << trial;
    const Expected<ChoiceCost> check = evaluate_choice(p, result->choice);
    ASSERT_TRUE(check.has_value()) << check.error().to_string();
    EXPECT_EQ(check->total, result->cost.total);
    if (p.usage_limit != kForbidden && check->peak_usage == p.usage_limit) ++binding;
  }
  EXPECT_GT(feasible, 200);
  EXPECT_GT(infeasible, 10);
  EXPECT_GT(binding, 20);  // the limit decides many cases
}

TEST(SolveSharding, LocalSearchAloneStaysFeasibleAndNeverBeatsTheOptimum) {
  std::mt19937_64 rng(16);
  int optimal = 0, solved = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const ShardingProblem p = random_problem(rng);
    const std::optional<std::int64_t> optimum = exhaustive_optimum(p);
    SolveOptions options = budget(300);
    options.milp_max_cells = 0;
    const Expected<ShardingResult> result = solve_sharding(p, options);
    if (!result) continue;  // it may miss a choice avoiding forbidden pairs; never claims a wrong one
    ASSERT_TRUE(optimum.has_value()) << "trial " << trial;
    ASSERT_TRUE(evaluate_choice(p, result->choice).has_value()) << "trial " << trial;
    EXPECT_GE(result->cost.total, *optimum);
    ++solved;
    optimal += result->cost.total == *optimum;
  }
  EXPECT_GT(solved, 150);
  EXPECT_GT(optimal, solved * 3 / 4) << optimal << " of " << solved;
}

// A random problem near the limit of enumeration (up to 4^9 choices): long-lived nodes whose usage
// competes for a limit between the least and the largest peak, on a chain plus a few cross edges, with
// no forbidden entries (every case has an optimum).
ShardingProblem random_tight_problem(std::mt19937_64& rng) {
  auto draw = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  ShardingProblem p;
  const int n = draw(5, 9);
  std::int64_t least = 0, most = 0;
  for (int i = 0; i < n; ++i) {
    ShardingNode node;
    node.start = draw(0, 6);
    node.end = node.start + draw(1, 6);
    const int k = draw(2, 4);
    for (int s = 0; s < k; ++s) {
      node.usages.push_back(draw(1, 12));
      node.costs.push_back(draw(0, 100) + 40 / node.usages.back() * 10);  // more memory, mostly cheaper
    }
    least += *std::min_element(node.usages.begin(), node.usages.end());
    most += *std::max_element(node.usages.begin(), node.usages.end());
    p.nodes.push_back(node);
  }
  for (int i = 0; i + 1 < n; ++i) p.edges.push_back({i, i + 1, {}});
  for (int e = draw(0, 3); e > 0; --e) {
    const int from = draw(0, n - 1), to = draw(0, n - 1);
    if (from != to) p.edges.push_back({from, to, {}});
  }
  for (ShardingEdge& edge : p.edges)
    for (std::size_t c = 0; c < p.nodes[static_cast<std::size_t>(edge.from)].costs.size() *
                                    p.nodes[static_cast<std::size_t>(edge.to)].costs.size();
         ++c)
      edge.costs.push_back(draw(0, 60));
  p.usage_limit = draw(static_cast<int>(least / 2), static_cast<int>(most / 2));
  return p;
}

// The brief's quality bar for the heuristic path (no MILP): within 2 % of the exhaustive optimum in
// nearly every case, never an infeasible choice, never below the optimum.
TEST(SolveSharding, HeuristicIsWithinTwoPercentOfTheExhaustiveOptimum) {
  std::mt19937_64 rng(18);
  int solved = 0, close = 0, infeasible = 0, binding = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const ShardingProblem p = random_tight_problem(rng);
    const std::optional<std::int64_t> optimum = exhaustive_optimum(p);
    SolveOptions options = budget(400);
    options.milp_max_cells = 0;
    const Expected<ShardingResult> result = solve_sharding(p, options);
    if (!optimum) {
      EXPECT_FALSE(result.has_value()) << "trial " << trial;
      ++infeasible;
      continue;
    }
    ASSERT_TRUE(result.has_value()) << "trial " << trial << ": " << result.error().to_string();
    const Expected<ChoiceCost> check = evaluate_choice(p, result->choice);
    ASSERT_TRUE(check.has_value()) << "trial " << trial << ": " << check.error().to_string();
    EXPECT_GE(check->total, *optimum) << "trial " << trial;
    ++solved;
    close += static_cast<double>(check->total) <= 1.02 * static_cast<double>(*optimum);
    binding += check->peak_usage * 10 >= p.usage_limit * 9;
  }
  EXPECT_GT(solved, 200);
  EXPECT_GT(infeasible, 5);  // the limit sometimes sits below the least usage
  EXPECT_GT(binding, solved / 2) << binding << " of " << solved;  // the limit decides most cases
  EXPECT_GE(close, solved * 97 / 100) << close << " of " << solved << " within 2 %";
}

// A chain whose every node can save cost by using more memory, under a limit that lets only some do.
ShardingProblem tight_chain(int n, std::int64_t limit) {
  ShardingProblem p;
  for (int i = 0; i < n; ++i) p.nodes.push_back({"", i, i + 3, {10, 1}, {1, 4}});
  for (int i = 0; i + 1 < n; ++i) p.edges.push_back({i, i + 1, {0, 2, 2, 0}});
  p.usage_limit = limit;
  return p;
}

// tight_chain with three strategies a node, random costs and usages drawn from `seed`.
ShardingProblem three_way_chain(int n, std::int64_t limit, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  ShardingProblem p = tight_chain(n, limit);
  for (ShardingNode& node : p.nodes) {
    node.costs = {static_cast<std::int64_t>(rng() % 100), static_cast<std::int64_t>(rng() % 100), 5};
    node.usages = {1, 3, static_cast<std::int64_t>(rng() % 5)};
  }
  for (ShardingEdge& edge : p.edges) {
    edge.costs.clear();
    for (int c = 0; c < 9; ++c) edge.costs.push_back(static_cast<std::int64_t>(rng() % 50));
  }
  return p;
}

TEST(SolveSharding, StaysUnderATightLimit) {
  for (std::int64_t limit = 3; limit <= 12; limit += 3) {
    const ShardingProblem p = tight_chain(40, limit);  // three nodes live at once: least usage 3
    SolveOptions options = budget(500);
    options.milp_max_cells = 0;  // the local search's own feasibility
    const Expected<ShardingResult> result = solve_sharding(p, options);
    ASSERT_TRUE(result.has_value()) << result.error().to_string();
    EXPECT_LE(result->cost.peak_usage, limit);
    EXPECT_TRUE(evaluate_choice(p, result->choice).has_value());
  }
}

TEST(SolveSharding, RefusesALimitBelowTheLeastUsageNamingThePeak) {
  const Expected<ShardingResult> result = solve_sharding(tight_chain(10, 2), budget(10));
  ASSERT_FALSE(result.has_value());
  EXPECT_NE(result.error().message.find("no choice fits the usage limit of 2"), std::string::npos)
      << result.error().message;
  EXPECT_NE(result.error().message.find("the peak is 3"), std::string::npos) << result.error().message;
}

TEST(SolveSharding, RefusesANodeWhoseStrategiesAreAllForbidden) {
  ShardingProblem p = tight_chain(3, 100);
  p.nodes[1].costs = {kForbidden, kForbidden};
  const Expected<ShardingResult> result = solve_sharding(p, budget(10));
  ASSERT_FALSE(result.has_value());
  EXPECT_NE(result.error().message.find("node 1: every strategy is forbidden"), std::string::npos)
      << result.error().message;
}

// A ring of nodes tied by near-forbidden edge costs (1e18 unless both ends take the same strategy), each
// preferring its second strategy but starting from its first (less usage): only switching the whole ring
// at once pays. The ring is longer than a tree move (48 nodes) and closes a cycle, so only moves of the whole
// tie reach the optimum: the group step (the ring is one group) or the chain move (every neighbour follows).
TEST(SolveSharding, MovesARingTiedByNearForbiddenCostsAtOnce) {
  constexpr int kRing = 120;
  constexpr std::int64_t kTie = 1'000'000'000'000'000'000;
  ShardingProblem p;
  for (int i = 0; i < kRing; ++i) p.nodes.push_back({"", i, i + 1, {10, 1}, {1, 2}});
  for (int i = 0; i < kRing; ++i) p.edges.push_back({i, (i + 1) % kRing, {0, kTie, kTie, 0}});
  p.usage_limit = 2;
  SolveOptions options = budget(400);
  options.milp_max_cells = 0;
  const Expected<ShardingResult> result = solve_sharding(p, options);
  ASSERT_TRUE(result.has_value()) << result.error().to_string();
  EXPECT_EQ(result->cost.total, kRing);
  EXPECT_EQ(result->choice.strategies, std::vector<int>(kRing, 1));
}

// A search told to stop below a cost stops at the first best below it, the rest of its budget unused (the
// solver's feasibility stage: it ran its whole share, 15 % of the timeout, after the last near-forbidden
// cost was gone). A path of 60 nodes, each cheaper at its second strategy, starts from the first with a
// near-forbidden cost on one node.
TEST(SolveSharding, ASearchStopsOnceItsBestIsBelowItsStopCost) {
  constexpr std::int64_t kMarker = 1'000'000'000'000'000'000;
  ShardingProblem p;
  for (int i = 0; i < 60; ++i) p.nodes.push_back({"", i, i + 1, {i == 7 ? kMarker : 5, 1}, {1, 1}});
  for (int i = 0; i + 1 < 60; ++i) p.edges.push_back({i, i + 1, {0, 3, 3, 0}});
  for (const WideCost stop : {WideCost{0}, WideCost{kNearForbidden}}) {
    LocalSearch search(p, 1);
    ASSERT_TRUE(search.start_from(ShardingChoice{std::vector<int>(60, 0)}));
    LocalSearchLimits limits;
    limits.iterations = 500;
    limits.stop_below = stop;
    search.run(limits, {});
    EXPECT_LT(search.best_cost(), WideCost{kNearForbidden});
    if (stop > 0) {
      EXPECT_LT(search.iterations(), 500) << "it went on after its best fell below the stop cost";
    } else {
      EXPECT_EQ(search.iterations(), 500);
    }
  }
}

// A timeout far shorter than any search: the solver still returns a feasible choice (the start; the
// MILP has no time left and is skipped). Asserted on the result, never on the time.
TEST(SolveSharding, ReturnsAFeasibleChoiceUnderATinyTimeout) {
  ShardingProblem p = three_way_chain(200, 8, 19);
  for (const std::int64_t cells : {std::int64_t{0}, std::int64_t{400'000}}) {  // local search; MILP
    SolveOptions options;
    options.timeout_seconds = 1e-6;
    options.milp_max_cells = cells;
    const Expected<ShardingResult> result = solve_sharding(p, options);
    ASSERT_TRUE(result.has_value()) << result.error().to_string();
    const Expected<ChoiceCost> check = evaluate_choice(p, result->choice);
    ASSERT_TRUE(check.has_value()) << check.error().to_string();
    EXPECT_LE(check->peak_usage, p.usage_limit);
  }
}

TEST(SolveSharding, IsDeterministicForASeedAndABudget) {
  ShardingProblem p = three_way_chain(300, 500, 17);
  p.usage_limit = 7;
  SolveOptions options = budget(3'000);
  options.milp_max_cells = 0;
  const auto first = solve_sharding(p, options);
  const auto second = solve_sharding(p, options);
  ASSERT_TRUE(first.has_value() && second.has_value());
  EXPECT_EQ(first->choice.strategies, second->choice.strategies);
  EXPECT_EQ(first->iterations, second->iterations);
  EXPECT_GE(first->iterations, 2 * 3'000);  // two searches, the whole budget each, after their Lagrangian rounds
}

}  // namespace
}  // namespace loom::search
