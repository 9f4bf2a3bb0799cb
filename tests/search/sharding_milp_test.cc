// The MILP's deadline: CBC checks its own time limit between nodes only, so solve_milp stops Clp and
// CBC by event handlers at the deadline; a run cut short never claims optimality.
#include "../../src/search/sharding_milp.h"

#include <gtest/gtest.h>

#include <random>

namespace loom::search {
namespace {

// A grid of 3-strategy nodes with random edge costs and a binding usage limit: an LP of thousands of
// rows, which takes many simplex iterations.
ShardingProblem grid(int side, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  ShardingProblem p;
  for (int i = 0; i < side * side; ++i)
    p.nodes.push_back({"", i % side, i % side + 2, {static_cast<std::int64_t>(rng() % 100), static_cast<std::int64_t>(rng() % 100), 50},
                       {1, 3, 2}});
  auto link = [&](int a, int b) {
    ShardingEdge edge{a, b, {}};
    for (int c = 0; c < 9; ++c) edge.costs.push_back(static_cast<std::int64_t>(rng() % 60));
    p.edges.push_back(edge);
  };
  for (int r = 0; r < side; ++r)
    for (int c = 0; c < side; ++c) {
      if (c + 1 < side) link(r * side + c, r * side + c + 1);
      if (r + 1 < side) link(r * side + c, (r + 1) * side + c);
    }
  p.usage_limit = 4 * side;
  return p;
}

TEST(SolveMilp, StopsAtItsDeadlineWithoutClaimingOptimality) {
  const ShardingProblem p = grid(12, 7);
  const MilpOutcome cut = solve_milp(p, nullptr, 20'000, 1e-9);
  EXPECT_FALSE(cut.proven_optimal);
  EXPECT_TRUE(cut.stopped_at_deadline);  // the time counts from the call: building the model used it up
  if (cut.choice) {
    EXPECT_EQ(cut.choice->strategies.size(), p.nodes.size());
  }
  // Given time and nodes, the same MILP is solved (the deadline, not the model, stopped the first run).
  const MilpOutcome full = solve_milp(p, nullptr, 20'000, 60);
  ASSERT_TRUE(full.choice.has_value());
  EXPECT_FALSE(full.stopped_at_deadline);
  EXPECT_TRUE(evaluate_choice(p, *full.choice).has_value());
}

}  // namespace
}  // namespace loom::search
