#include "loom/core/disjoint_sets.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <utility>

namespace loom {
namespace {

// The sets the pairs link, by a naive closure: labels spread along the pairs until nothing changes.
std::vector<std::size_t> closure_labels(std::size_t n, const std::vector<std::pair<std::size_t, std::size_t>>& pairs) {
  std::vector<std::size_t> label(n);
  std::iota(label.begin(), label.end(), std::size_t{0});
  for (bool changed = true; changed;) {
    changed = false;
    for (const auto& [a, b] : pairs)
      if (label[a] != label[b]) {
        label[a] = label[b] = std::min(label[a], label[b]);
        changed = true;
      }
  }
  return label;
}

TEST(DisjointSets, FindAgreesWithTheNaiveClosureOfRandomUnions) {
  std::mt19937_64 rng(11);
  int joined = 0, apart = 0;
  for (int trial = 0; trial < 500; ++trial) {
    const std::size_t n = 1 + rng() % 40;
    std::vector<std::pair<std::size_t, std::size_t>> pairs;
    DisjointSets sets(n);
    for (std::uint64_t k = 0, m = rng() % (n + 5); k < m; ++k) {
      pairs.emplace_back(rng() % n, rng() % n);
      sets.unite(pairs.back().first, pairs.back().second);
    }
    ASSERT_EQ(sets.size(), n);
    const std::vector<std::size_t> label = closure_labels(n, pairs);
    for (std::size_t x = 0; x < n; ++x)
      for (std::size_t y = 0; y < n; ++y) {
        const bool same = label[x] == label[y];
        ASSERT_EQ(sets.find(x) == sets.find(y), same) << "trial " << trial << ": " << x << ", " << y;
        (same ? joined : apart) += x != y;
      }
  }
  EXPECT_GT(joined, 1000);  // both answers were checked often
  EXPECT_GT(apart, 1000);
}

TEST(DisjointSets, TheUnionsRepresentativeIsTheSecondSets) {
  DisjointSets sets(6);
  sets.unite(0, 1);
  EXPECT_EQ(sets.find(0), 1u);
  sets.unite(2, 3);
  sets.unite(1, 3);  // {0, 1} into {2, 3}
  EXPECT_EQ(sets.find(0), 3u);
  EXPECT_EQ(sets.find(2), 3u);
  sets.unite(5, 0);  // {5} into {0, 1, 2, 3}: still 3
  EXPECT_EQ(sets.find(5), 3u);
  sets.unite(3, 3);  // a set with itself changes nothing
  EXPECT_EQ(sets.find(1), 3u);
  EXPECT_EQ(sets.find(4), 4u);
}

}  // namespace
}  // namespace loom
