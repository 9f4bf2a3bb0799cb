// Presolve's reductions are exact: on random small problems the presolved core's optimum, found by
// enumeration, equals the original's, and the choice it recovers costs the original exactly that.
#include "../../src/search/sharding_presolve.h"

#include <gtest/gtest.h>

#include <optional>
#include <random>

namespace loom::search {
namespace {

// Random small problems built to trigger every reduction: one-strategy nodes (folded), usage-neutral
// nodes of degree <= 2 (eliminated in series, chains included), dominated strategies, parallel edges,
// forbidden entries, and a usage limit that binds in many cases.
ShardingProblem random_problem(std::mt19937_64& rng) {
  auto draw = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  ShardingProblem p;
  const int n = draw(2, 8);
  for (int i = 0; i < n; ++i) {
    ShardingNode node;
    node.start = draw(0, 6);
    node.end = draw(0, 3) == 0 ? node.start : node.start + draw(1, 4);  // some never live
    const int k = draw(1, 3);
    const bool neutral = draw(0, 2) == 0;  // equal usages: eliminable when of degree <= 2
    const int usage = draw(0, 6);
    for (int s = 0; s < k; ++s) {
      node.costs.push_back(draw(0, 24) == 0 ? kForbidden : draw(0, 30));
      node.usages.push_back(neutral ? usage : draw(0, 6));
    }
    p.nodes.push_back(node);
  }
  for (int i = 0; i + 1 < n; ++i)  // a chain, so that series reductions follow it
    if (draw(0, 4) != 0) p.edges.push_back({i, i + 1, {}});
  for (int e = draw(0, 3); e > 0; --e) {
    const int from = draw(0, n - 1), to = draw(0, n - 1);
    if (from != to) p.edges.push_back({from, to, {}});
  }
  for (ShardingEdge& edge : p.edges)
    for (std::size_t c = 0; c < p.nodes[static_cast<std::size_t>(edge.from)].costs.size() *
                                    p.nodes[static_cast<std::size_t>(edge.to)].costs.size();
         ++c)
      edge.costs.push_back(draw(0, 29) == 0 ? kForbidden : draw(0, 25));
  p.usage_limit = draw(0, 3) == 0 ? kForbidden : draw(3, 18);
  return p;
}

struct Optimum {
  std::int64_t cost = 0;
  ShardingChoice choice;
};

// The optimum by enumerating every choice, or nullopt when none passes the evaluator.
std::optional<Optimum> exhaustive_optimum(const ShardingProblem& p) {
  ShardingChoice choice{std::vector<int>(p.nodes.size(), 0)};
  std::optional<Optimum> best;
  for (;;) {
    if (auto cost = evaluate_choice(p, choice); cost && (!best || cost->total < best->cost))
      best = Optimum{cost->total, choice};
    std::size_t i = 0;
    while (i < p.nodes.size() && ++choice.strategies[i] == static_cast<int>(p.nodes[i].costs.size()))
      choice.strategies[i++] = 0;
    if (i == p.nodes.size()) return best;
  }
}

TEST(Presolve, KeepsTheExhaustiveOptimumOnRandomSmallProblems) {
  std::mt19937_64 rng(26);
  int compared = 0, reduced = 0, eliminated = 0, dropped = 0;
  for (int trial = 0; trial < 600; ++trial) {
    const ShardingProblem p = random_problem(rng);
    const Expected<Presolved> presolved = presolve(p);
    const std::optional<Optimum> original = exhaustive_optimum(p);
    if (!presolved) {  // only a node whose every strategy is forbidden is refused
      EXPECT_FALSE(original.has_value()) << "trial " << trial << ": " << presolved.error().to_string();
      continue;
    }
    const std::optional<Optimum> core = exhaustive_optimum(presolved->core);
    ASSERT_EQ(original.has_value(), core.has_value()) << "trial " << trial;
    if (!original) continue;
    ++compared;
    EXPECT_EQ(core->cost, original->cost) << "trial " << trial;
    const Expected<ChoiceCost> recovered = evaluate_choice(p, recover_choice(*presolved, core->choice));
    ASSERT_TRUE(recovered.has_value()) << "trial " << trial << ": " << recovered.error().to_string();
    EXPECT_EQ(recovered->total, original->cost) << "trial " << trial;
    reduced += presolved->free_nodes < static_cast<int>(p.nodes.size());
    eliminated += presolved->nodes_eliminated > 0;
    dropped += presolved->strategies_dropped > 0;
  }
  EXPECT_GT(compared, 300);
  EXPECT_GT(eliminated, 100);  // the cases exercise series reduction
  EXPECT_GT(dropped, 100);     // and dominance
  EXPECT_GT(reduced, compared / 2);
}

}  // namespace
}  // namespace loom::search
