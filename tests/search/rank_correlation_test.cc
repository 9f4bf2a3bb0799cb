// search/rank_correlation.h: Spearman's rho and Kendall's tau-b against hand-computed values, and their laws
// on random samples (symmetry, bounds, invariance under monotone transforms, 1 against itself).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "loom/search/rank_correlation.h"

namespace loom::search {
namespace {

TEST(AverageRanks, TiesShareTheirMeanRank) {
  const std::vector<double> v{10, 30, 20, 30, 5};
  EXPECT_EQ(average_ranks(v), (std::vector<double>{2, 4.5, 3, 4.5, 1}));
}

TEST(Spearman, HandComputed) {
  const std::vector<double> x{1, 2, 3, 4, 5}, y{2, 1, 4, 3, 5}, reversed{5, 4, 3, 2, 1};
  EXPECT_DOUBLE_EQ(spearman(x, x), 1);
  EXPECT_DOUBLE_EQ(spearman(x, reversed), -1);
  EXPECT_NEAR(spearman(x, y), 0.8, 1e-12);  // 1 - 6 * 4 / (5 * 24)
  EXPECT_EQ(spearman(x, std::vector<double>{1, 1, 1, 1, 1}), 0);  // constant: undefined, 0
  EXPECT_EQ(spearman(std::vector<double>{1}, std::vector<double>{2}), 0);
}

TEST(KendallTauB, HandComputed) {
  const std::vector<double> x{1, 2, 3, 4, 5}, y{2, 1, 4, 3, 5};
  EXPECT_NEAR(kendall_tau_b(x, y), 0.6, 1e-12);  // 8 concordant, 2 discordant of 10 pairs
  EXPECT_DOUBLE_EQ(kendall_tau_b(x, std::vector<double>{5, 4, 3, 2, 1}), -1);
  // One tie in y: 5 concordant, 0 discordant, sqrt(6 * 5).
  EXPECT_NEAR(kendall_tau_b(std::vector<double>{1, 2, 3, 4}, std::vector<double>{1, 2, 2, 3}), 5 / std::sqrt(30.0),
              1e-12);
}

TEST(RankCorrelation, LawsOnRandomSamples) {
  std::mt19937 rng(15);
  for (int trial = 0; trial < 200; ++trial) {
    const int n = 2 + static_cast<int>(rng() % 30);
    std::vector<double> x(n), y(n);
    for (int i = 0; i < n; ++i) x[i] = rng() % 10, y[i] = rng() % 10;  // small range: ties happen
    std::vector<double> x_cubed(n);
    std::ranges::transform(x, x_cubed.begin(), [](double v) { return v * v * v + 1; });
    for (const auto corr : {&spearman, &kendall_tau_b}) {
      const double c = corr(x, y);
      EXPECT_GE(c, -1 - 1e-12);
      EXPECT_LE(c, 1 + 1e-12);
      EXPECT_NEAR(c, corr(y, x), 1e-12);
      EXPECT_NEAR(c, corr(x_cubed, y), 1e-12);  // ranks only
      if (std::ranges::any_of(x, [&](double v) { return v != x[0]; })) {
        EXPECT_NEAR(corr(x, x), 1, 1e-12);
      }
    }
  }
}

}  // namespace
}  // namespace loom::search
