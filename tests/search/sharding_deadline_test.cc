// The solver's timeout holds: every stage is given an end no later than the timeout (counted from
// options.started, a caller's start), a stage that finds no time left is skipped, and the MILP stops at
// the solve's deadline (no floor past it). Asserted on the stages the solver reports, never on wall time.
#include "loom/search/sharding_solver.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "sharding_test_grid.h"

namespace loom::search {
namespace {

const SolveStage* find_stage(const ShardingResult& result, const std::string& name) {
  auto it = std::find_if(result.stages.begin(), result.stages.end(), [&](const SolveStage& s) { return s.name == name; });
  return it == result.stages.end() ? nullptr : &*it;
}

// Checks the stages of a timed solve: each given until the timeout at most, and once one ends past the
// deadline every later one is skipped.
void expect_stages_within(const ShardingResult& result, double timeout) {
  ASSERT_FALSE(result.stages.empty());
  bool passed = false;
  for (const SolveStage& stage : result.stages) {
    EXPECT_LE(stage.allowed, timeout * (1 + 1e-9)) << stage.name;
    if (passed) {
      EXPECT_EQ(stage.end, SolveStage::End::kSkipped) << stage.name << " ran after the deadline";
    }
    passed = passed || stage.end != SolveStage::End::kDone;
  }
}

TEST(SolveShardingDeadline, TheMilpStopsAtTheSolvesDeadline) {
  const ShardingProblem p = random_grid(40, 3);  // the MILP path (about 30 000 cells), far from closed in time
  for (const double timeout : {0.02, 0.1}) {
    SolveOptions options;
    options.timeout_seconds = timeout;
    const Expected<ShardingResult> result = solve_sharding(p, options);
    ASSERT_TRUE(result.has_value()) << result.error().to_string();
    EXPECT_LE(result->cost.peak_usage, p.usage_limit);
    expect_stages_within(*result, timeout);
    const SolveStage* milp = find_stage(*result, "milp");
    ASSERT_NE(milp, nullptr) << "the grid goes to the MILP path";
    // The MILP cannot close this grid in the time: it ends at the deadline, or had none left to start.
    EXPECT_NE(milp->end, SolveStage::End::kDone);
    EXPECT_FALSE(result->proven_optimal);
  }
}

// A timeout counted from a start already past: nothing but the mandatory stages runs, and the answer is
// the (feasible) start.
TEST(SolveShardingDeadline, AStartPastTheTimeoutSkipsTheSearchAndTheMilp) {
  const ShardingProblem p = random_grid(10, 5);
  SolveOptions options;
  options.timeout_seconds = 1;
  options.started = std::chrono::steady_clock::now() - std::chrono::seconds(2);
  const Expected<ShardingResult> result = solve_sharding(p, options);
  ASSERT_TRUE(result.has_value()) << result.error().to_string();
  EXPECT_LE(result->cost.peak_usage, p.usage_limit);
  const SolveStage* milp = find_stage(*result, "milp");
  ASSERT_NE(milp, nullptr);
  EXPECT_EQ(milp->end, SolveStage::End::kSkipped);
  EXPECT_EQ(result->method, "local search");
  const SolveStage* search = find_stage(*result, "search");
  ASSERT_NE(search, nullptr);
  EXPECT_EQ(search->end, SolveStage::End::kDeadline);
  EXPECT_EQ(result->iterations, 0) << "no move after the deadline";
}

// Without a timeout the same grid runs every stage to its end (node limits bound the MILP).
TEST(SolveShardingDeadline, WithoutATimeoutEveryStageIsDone) {
  const ShardingProblem p = random_grid(6, 9);
  SolveOptions options;
  options.iterations = 500;
  const Expected<ShardingResult> result = solve_sharding(p, options);
  ASSERT_TRUE(result.has_value()) << result.error().to_string();
  for (const SolveStage& stage : result->stages) {
    EXPECT_EQ(stage.end, SolveStage::End::kDone) << stage.name;
    EXPECT_EQ(stage.allowed, 0) << stage.name;
  }
  ASSERT_NE(find_stage(*result, "milp"), nullptr);
}

}  // namespace
}  // namespace loom::search
