// The solver's timeout holds: every stage is given an end no later than the timeout (counted from
// options.started, a caller's start), a stage that finds no time left is skipped, and the MILP stops at
// the solve's deadline (no floor past it). Asserted on the stages the solver reports, never on wall time.
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

// A 4 x 4 layout of groups, each a 4 x 4 grid of 3-strategy nodes tied one-to-one (any other pair costs the
// near-forbidden marker), neighbouring groups joined by random edges: the group step's problem.
ShardingProblem grid_of_groups(std::uint64_t seed) {
  constexpr int kSide = 4, kGroupSide = 4;
  constexpr std::int64_t kTie = 1'000'000'000'000'000'000;  // the contest's near-forbidden marker
  std::mt19937_64 rng(seed);
  ShardingProblem p;
  auto node = [](int gr, int gc, int r, int c) {
    return ((gr * kSide + gc) * kGroupSide + r) * kGroupSide + c;
  };
  for (int i = 0; i < kSide * kSide * kGroupSide * kGroupSide; ++i)
    p.nodes.push_back({"", 0, 1, {static_cast<std::int64_t>(rng() % 100), static_cast<std::int64_t>(rng() % 100), 50},
                       {1, 2, 3}});
  auto link = [&](int a, int b, bool tie) {
    ShardingEdge edge{a, b, {}};
    for (int s = 0; s < 3; ++s)
      for (int t = 0; t < 3; ++t) edge.costs.push_back(tie ? (s == t ? 0 : kTie) : static_cast<std::int64_t>(rng() % 60));
    p.edges.push_back(edge);
  };
  for (int gr = 0; gr < kSide; ++gr)
    for (int gc = 0; gc < kSide; ++gc)
      for (int r = 0; r < kGroupSide; ++r)
        for (int c = 0; c < kGroupSide; ++c) {
          if (c + 1 < kGroupSide) link(node(gr, gc, r, c), node(gr, gc, r, c + 1), true);
          if (r + 1 < kGroupSide) link(node(gr, gc, r, c), node(gr, gc, r + 1, c), true);
        }
  for (int gr = 0; gr < kSide; ++gr)
    for (int gc = 0; gc < kSide; ++gc)
      for (int i = 0; i < kGroupSide; ++i) {
        if (gc + 1 < kSide) link(node(gr, gc, i, kGroupSide - 1), node(gr, gc + 1, i, 0), false);
        if (gr + 1 < kSide) link(node(gr, gc, kGroupSide - 1, i), node(gr + 1, gc, 0, i), false);
      }
  p.usage_limit = 3 * static_cast<std::int64_t>(p.nodes.size());
  return p;
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
