#include "loom/plan/index_range.h"

#include <random>
#include <set>

#include <gtest/gtest.h>

namespace loom::plan {
namespace {

std::set<std::int64_t> elements(const IndexRange& r) {
  std::set<std::int64_t> out;
  for (std::int64_t i = r.start; i < r.stop; i += r.step) out.insert(i);
  return out;
}

TEST(IndexRange, SizeAndContains) {
  const IndexRange r{1, 8, 2};  // 1 3 5 7
  EXPECT_EQ(r.size(), 4);
  EXPECT_EQ(r.last(), 7);
  EXPECT_TRUE(r.contains(5));
  EXPECT_FALSE(r.contains(4));
  EXPECT_FALSE(r.contains(9));
  EXPECT_EQ(r.to_string(), "1:8:2");
  EXPECT_EQ((IndexRange{0, 4, 1}).to_string(), "0:4");
}

TEST(IndexRange, IntersectionOfInterleavedRangesIsEmpty) {
  EXPECT_TRUE(intersect(IndexRange{0, 10, 2}, IndexRange{1, 10, 2}).empty());
  EXPECT_EQ(intersect(IndexRange{0, 12, 2}, IndexRange{0, 12, 3}), (IndexRange{0, 7, 6}));
}

TEST(IndexRangeProperty, IntersectionEqualsSetIntersection) {
  const std::uint32_t seed = 11;
  std::mt19937 rng(seed);
  std::uniform_int_distribution<std::int64_t> pos(0, 40), step(1, 6);
  for (int i = 0; i < 20000; ++i) {
    IndexRange a{pos(rng), pos(rng), step(rng)}, b{pos(rng), pos(rng), step(rng)};
    const IndexRange c = intersect(a, b);
    std::set<std::int64_t> expected;
    for (std::int64_t x : elements(a))
      if (b.contains(x)) expected.insert(x);
    ASSERT_EQ(elements(c), expected) << "seed " << seed << " case " << i << ": " << a.to_string() << " & " << b.to_string()
                                     << " gave " << c.to_string();
    ASSERT_EQ(contains(a, c), true);
    const std::set<std::int64_t> in_a = elements(a), in_b = elements(b);
    ASSERT_EQ(contains(a, b), std::includes(in_a.begin(), in_a.end(), in_b.begin(), in_b.end()))
        << a.to_string() << " contains " << b.to_string();
  }
}

TEST(IndexRangeProperty, SplitsPartitionTheRange) {
  for (bool strided : {false, true})
    for (std::int64_t parts : {1, 2, 3, 4, 6})
      for (IndexRange whole : {IndexRange{0, 24, 1}, IndexRange{3, 51, 2}}) {
        std::multiset<std::int64_t> seen;
        for (std::int64_t k = 0; k < parts; ++k) {
          const IndexRange part = split_range(whole, parts, k, strided);
          EXPECT_EQ(part.size(), whole.size() / parts);
          for (std::int64_t x : elements(part)) seen.insert(x);
        }
        const std::set<std::int64_t> all = elements(whole);
        EXPECT_EQ(std::multiset<std::int64_t>(all.begin(), all.end()), seen)
            << whole.to_string() << " into " << parts << (strided ? " strided" : "");
      }
}

}  // namespace
}  // namespace loom::plan
