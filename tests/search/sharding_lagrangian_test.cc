// The Lagrangian search's passes (sharding_lagrangian.h): without a deadline one pass, the same as the
// search itself (deterministic); under a deadline, passes of whole rounds from the best choice, whose best
// fits the limit and costs no more than the first pass's start (how many passes fit is not asserted: wall time).
#include "../../src/search/sharding_lagrangian.h"

#include <gtest/gtest.h>

#include <chrono>

#include "sharding_test_grid.h"

namespace loom::search {
namespace {

ShardingChoice least_usage_start(const ShardingProblem& p) { return LocalSearch::least_usage(p); }

TEST(LagrangianPasses, WithoutADeadlineOnePassTheSameAsTheSearch) {
  for (std::uint64_t seed = 1; seed <= 8; ++seed) {
    const ShardingProblem p = random_grid(8, seed);
    LagrangianLimits limits;
    limits.rounds = 4;
    const ShardingChoice start = least_usage_start(p);
    const LagrangianOutcome one = lagrangian_search(p, start, seed, limits);
    const LagrangianOutcome passes = lagrangian_passes(p, start, seed, limits);
    EXPECT_EQ(passes.rounds, limits.rounds) << "seed " << seed;
    EXPECT_EQ(passes.best.strategies, one.best.strategies) << "seed " << seed;
    EXPECT_EQ(passes.cost, one.cost) << "seed " << seed;
    EXPECT_EQ(passes.iterations, one.iterations) << "seed " << seed;
  }
}

TEST(LagrangianPasses, UnderAFarDeadlineMorePassesRunAndTheBestFits) {
  for (std::uint64_t seed = 1; seed <= 4; ++seed) {
    const ShardingProblem p = random_grid(6, seed);  // a pass of 2 rounds takes well under a millisecond
    LagrangianLimits limits;
    limits.rounds = 2;
    limits.deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
    const ShardingChoice start = least_usage_start(p);
    const Expected<ChoiceCost> start_cost = evaluate_choice(p, start);
    ASSERT_TRUE(start_cost.has_value()) << "the least-usage start fits the grid's limit";
    const LagrangianOutcome passes = lagrangian_passes(p, start, seed, limits);
    // How many passes fit is the clock's (bench/iopddl times it); each pass that ran ran whole.
    EXPECT_GE(passes.rounds, limits.rounds) << "seed " << seed;
    EXPECT_EQ(passes.rounds % limits.rounds, 0) << "seed " << seed;
    const Expected<ChoiceCost> best = evaluate_choice(p, passes.best);
    ASSERT_TRUE(best.has_value()) << "seed " << seed << ": " << best.error().to_string();
    EXPECT_LE(best->peak_usage, p.usage_limit);
    EXPECT_EQ(WideCost{best->total}, passes.cost) << "seed " << seed;
    EXPECT_LE(best->total, start_cost->total) << "seed " << seed;
  }
}

}  // namespace
}  // namespace loom::search
