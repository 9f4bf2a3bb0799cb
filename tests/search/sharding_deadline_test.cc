// The solver's timeout holds: every stage is given an end no later than the timeout (counted from
// options.started, a caller's start), a stage that finds no time left is skipped, and the MILP stops at
// the solve's deadline (no floor past it). Asserted on the stages the solver reports, never on wall time;
// the stages also report their choices' costs.
#include "loom/search/sharding_solver.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

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

// The group step's shares count from its own start: when a caller's reading took half the timeout, the
// group step still gets its share (it was given ends already past and its MILP never ran). Independent of
// the box's speed: the group step starts no earlier than the time already past, so an end counted from its
// start lies beyond it (capped at the deadline, later still), where shares from the solve's start (at most
// 0.2 of the timeout) lie before it.
TEST(SolveShardingDeadline, TheGroupStepsShareCountsFromItsOwnStart) {
  const ShardingProblem p = grid_of_groups(4);
  SolveOptions options;
  options.timeout_seconds = 4;
  constexpr double kAlreadyPast = 2;  // seconds of the timeout a caller's reading took
  options.started = std::chrono::steady_clock::now() - std::chrono::seconds(2);
  options.milp_max_cells = 2'000;  // the nodes' problem is too large for it, the groups' is not
  const Expected<ShardingResult> result = solve_sharding(p, options);
  ASSERT_TRUE(result.has_value()) << result.error().to_string();
  const SolveStage* groups = find_stage(*result, "groups");
  ASSERT_NE(groups, nullptr) << "the ties make 16 groups of the free nodes";
  EXPECT_GT(groups->allowed, kAlreadyPast) << "the group step was given an end already past";
  expect_stages_within(*result, options.timeout_seconds);
}

// The stages report their choices' costs: on the grid of groups under a binding limit (1.3 per node, of
// the usages 1, 2, 3), the group MILP's choice (the group problem's optimum, the limit not looked at) is over
// the limit and costs no more than its repair, the descent after the repair costs no more than the repair,
// and the answer no more than the start.
TEST(SolveShardingDeadline, TheStagesReportTheirChoicesCosts) {
  for (std::uint64_t seed = 1; seed <= 4; ++seed) {
    const ShardingProblem p = grid_of_groups(seed, 1.3);
    SolveOptions options;
    options.iterations = 300;
    options.milp_max_cells = 2'000;  // the nodes' problem is too large for it, the groups' is not
    const Expected<ShardingResult> result = solve_sharding(p, options);
    ASSERT_TRUE(result.has_value()) << result.error().to_string();
    const SolveStage* start = find_stage(*result, "start");
    const SolveStage* groups = find_stage(*result, "groups");
    const SolveStage* repair = find_stage(*result, "group repair");
    const SolveStage* descent = find_stage(*result, "group descent");
    std::string names;
    for (const SolveStage& s : result->stages) names += s.name + " ";
    ASSERT_TRUE(start && groups && repair && descent) << "seed " << seed << ": " << names;
    ASSERT_TRUE(start->cost && groups->cost && repair->cost && descent->cost) << "seed " << seed;
    EXPECT_LE(*groups->cost, *repair->cost) << "seed " << seed;
    EXPECT_LE(*descent->cost, *repair->cost) << "seed " << seed;
    EXPECT_LE(result->cost.total, *start->cost) << "seed " << seed;
    EXPECT_FALSE(find_stage(*result, "presolve")->cost) << "presolve has no choice";
  }
}

// The start's groups descend beside the repaired group choice (the "start descent" stage, where they fit
// the limit): the answer costs no more than the group descent, nor than the start descent where it went
// on, on random grids of groups under a binding limit.
TEST(SolveShardingDeadline, TheAnswerCostsNoMoreThanEitherDescent) {
  int with_start_descent = 0;
  for (std::uint64_t seed = 1; seed <= 12; ++seed) {
    const ShardingProblem p = grid_of_groups(seed, 1.3 + 0.1 * static_cast<double>(seed % 4));
    SolveOptions options;
    options.iterations = 200;
    options.milp_max_cells = 2'000;  // the nodes' problem is too large for it, the groups' is not
    const Expected<ShardingResult> result = solve_sharding(p, options);
    ASSERT_TRUE(result.has_value()) << result.error().to_string();
    EXPECT_TRUE(evaluate_choice(p, result->choice).has_value()) << "seed " << seed;
    const SolveStage* start = find_stage(*result, "start");
    const SolveStage* descent = find_stage(*result, "group descent");
    const SolveStage* start_descent = find_stage(*result, "start descent");
    ASSERT_TRUE(start && start->cost && descent && descent->cost) << "seed " << seed;
    EXPECT_LE(result->cost.total, *descent->cost) << "seed " << seed;
    if (start_descent == nullptr) continue;
    ++with_start_descent;
    ASSERT_TRUE(start_descent->cost) << "seed " << seed;
    // The descent only lowers the cost, and the start's groups cost no more than the start here: where the
    // start breaks a tie inside a group, following the root saves a 1e18 against node costs below 100.
    EXPECT_LE(*start_descent->cost, *start->cost) << "seed " << seed;
    // It goes on when under 3/4 of the group descent's cost (kStartDescentShare).
    if (static_cast<double>(*start_descent->cost) < 0.75 * static_cast<double>(*descent->cost)) {
      EXPECT_LE(result->cost.total, *start_descent->cost) << "seed " << seed;
    }
  }
  EXPECT_GT(with_start_descent, 6) << "the start's groups fit on most grids";
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
