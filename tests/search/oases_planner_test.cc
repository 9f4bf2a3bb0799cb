// The Oases planner's chain solver (search/oases_planner.h): exact against brute force on random chains,
// the memory limit respected where the unconstrained optimum does not fit, and malformed requests refused.
#include "loom/search/oases_planner.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

namespace loom::search {
namespace {

OasesRequest random_request(std::mt19937& rng, int layers, int degrees) {
  std::uniform_real_distribution<double> seconds(0.0, 10.0);
  std::uniform_int_distribution<std::int64_t> bytes(1, 100);
  OasesRequest r;
  for (int d = 0; d < degrees; ++d) r.degrees.push_back(1 << d);
  r.base = seconds(rng);
  r.base_bytes = bytes(rng);
  r.node.resize(static_cast<std::size_t>(layers));
  r.bytes.resize(static_cast<std::size_t>(layers));
  for (int i = 0; i < layers; ++i)
    for (int d = 0; d < degrees; ++d) {
      r.node[static_cast<std::size_t>(i)].push_back(seconds(rng));
      r.bytes[static_cast<std::size_t>(i)].push_back(bytes(rng));
    }
  r.reshard.assign(static_cast<std::size_t>(layers - 1),
                   std::vector<std::vector<double>>(static_cast<std::size_t>(degrees),
                                                    std::vector<double>(static_cast<std::size_t>(degrees))));
  for (auto& boundary : r.reshard)
    for (auto& row : boundary)
      for (double& x : row) x = seconds(rng) - 3;  // measured terms may be negative
  return r;
}

struct Best {
  double seconds = std::numeric_limits<double>::infinity();
  bool found = false;
};

// Every assignment of degrees, through the independent evaluator.
Best brute_force(const OasesRequest& r) {
  const std::size_t layers = r.node.size(), degrees = r.degrees.size();
  std::vector<int> choice(layers, 0);
  Best best;
  while (true) {
    const Expected<OasesChoice> e = evaluate_oases(r, choice);
    EXPECT_TRUE(e.has_value());
    if (e->bytes <= r.memory_limit && e->seconds < best.seconds) best = {e->seconds, true};
    std::size_t i = 0;
    while (i < layers && ++choice[i] == static_cast<int>(degrees)) choice[i++] = 0;
    if (i == layers) return best;
  }
}

TEST(SolveOases, EqualsBruteForceOnRandomChains) {
  std::mt19937 rng(2024);
  int feasible = 0, infeasible = 0, constrained = 0;
  for (int trial = 0; trial < 600; ++trial) {
    const int layers = 1 + static_cast<int>(rng() % 7), degrees = 1 + static_cast<int>(rng() % 4);
    OasesRequest r = random_request(rng, layers, degrees);
    // Limits from below the least any choice needs to above the most.
    r.memory_limit = r.base_bytes + static_cast<std::int64_t>(rng() % static_cast<unsigned>(100 * layers + 20));
    SCOPED_TRACE(trial);
    const Best expected = brute_force(r);
    const Expected<OasesChoice> got = solve_oases(r);
    if (!expected.found) {
      ASSERT_FALSE(got.has_value());
      EXPECT_NE(got.error().message.find("no choice of degrees fits"), std::string::npos);
      ++infeasible;
      continue;
    }
    ASSERT_TRUE(got.has_value()) << got.error().to_string();
    EXPECT_NEAR(got->seconds, expected.seconds, 1e-9 * (1 + std::abs(expected.seconds)));
    // The choice is what it claims: re-evaluated term by term, within the limit.
    const Expected<OasesChoice> again = evaluate_oases(r, got->choice);
    ASSERT_TRUE(again.has_value());
    EXPECT_NEAR(again->seconds, got->seconds, 1e-9 * (1 + std::abs(got->seconds)));
    EXPECT_EQ(again->bytes, got->bytes);
    EXPECT_LE(got->bytes, r.memory_limit);
    ++feasible;
    OasesRequest free = r;
    free.memory_limit = std::numeric_limits<std::int64_t>::max() / 2;
    if (solve_oases(free)->seconds < got->seconds - 1e-9) ++constrained;
  }
  // The random limits exercise every case: fits, binds, cannot fit.
  EXPECT_GT(feasible, 200);
  EXPECT_GT(infeasible, 20);
  EXPECT_GT(constrained, 50);
}

// Two degrees: the low one fast but large. Without a limit every layer takes it; with room for two low
// layers only, the exact optimum puts the two where they save most (where the reshard is cheapest).
TEST(SolveOases, MemoryLimitMovesTheOptimumToWhatFits) {
  OasesRequest r{.degrees = {2, 4},
                 .node = {{1.0, 2.0}, {1.0, 3.0}, {1.0, 2.0}},
                 .bytes = {{10, 4}, {10, 4}, {10, 4}},
                 .reshard = {{{0, 0.25}, {0.25, 0}}, {{0, 0.25}, {0.25, 0}}},
                 .base = 0.5,
                 .base_bytes = 2,
                 .memory_limit = 1000};
  Expected<OasesChoice> free = solve_oases(r);
  ASSERT_TRUE(free.has_value());
  EXPECT_EQ(free->choice, (std::vector<int>{0, 0, 0}));
  EXPECT_DOUBLE_EQ(free->seconds, 3.5);
  EXPECT_EQ(free->bytes, 32);
  r.memory_limit = 26;  // two layers at degree 2 (2 + 10 + 10 + 4 = 26), not three (32)
  Expected<OasesChoice> bound = solve_oases(r);
  ASSERT_TRUE(bound.has_value());
  // {2,2,4}: 0.5 + 1 + 1 + 2 + 0.25 = 4.75; {2,4,2}: 0.5 + 1 + 3 + 1 + 0.5 = 6; {4,2,2}: 4.75 as well.
  EXPECT_DOUBLE_EQ(bound->seconds, 4.75);
  EXPECT_EQ(bound->bytes, 26);
  EXPECT_NE(bound->choice[1], 1);  // the costly middle layer stays at degree 2
  r.memory_limit = 13;  // below 2 + 3 x 4
  const Expected<OasesChoice> none = solve_oases(r);
  ASSERT_FALSE(none.has_value());
  EXPECT_NE(none.error().message.find("the least memory any needs is 14 bytes"), std::string::npos);
}

TEST(SolveOases, RefusesMalformedRequests) {
  OasesRequest r{.degrees = {1, 2}, .node = {{1, 1}, {1, 1}}, .bytes = {{1, 1}, {1, 1}},
                 .reshard = {{{0, 0}, {0, 0}}}, .memory_limit = 10};
  ASSERT_TRUE(solve_oases(r).has_value());
  OasesRequest no_boundary = r;
  no_boundary.reshard.clear();
  EXPECT_FALSE(solve_oases(no_boundary).has_value());
  OasesRequest short_row = r;
  short_row.node[1].pop_back();
  EXPECT_NE(solve_oases(short_row).error().message.find("layer 1"), std::string::npos);
  OasesRequest nan = r;
  nan.reshard[0][1][0] = std::nan("");
  EXPECT_NE(solve_oases(nan).error().message.find("boundary 0"), std::string::npos);
  EXPECT_FALSE(solve_oases(OasesRequest{}).has_value());
  EXPECT_NE(evaluate_oases(r, std::vector<int>{0, 2}).error().message.find("layer 1 chooses degree index 2"),
            std::string::npos);
}

}  // namespace
}  // namespace loom::search
