// sample_row (sim/timeline_sample.h): within the budget, every span in exactly one box that contains
// it, boxes in order; random rows.
#include "loom/sim/timeline_sample.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

namespace loom::sim {
namespace {

TEST(SampleRow, KeepsEverySpanWhenTheyFit) {
  const std::vector<Span> spans = {{0, 1}, {1, 1.5}, {2, 4}};
  const auto boxes = sample_row(spans, 4, 3);
  ASSERT_EQ(boxes.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) EXPECT_EQ(boxes[i].count(), 1u);
}

TEST(SampleRow, MergesShortSpansPerWindowAndKeepsLongOnes) {
  // 100 spans of 0.01 in [0, 1), one long span [1, 3), 100 short ones in [3, 4): 4 windows of 1.
  std::vector<Span> spans;
  for (int i = 0; i < 100; ++i) spans.push_back({i * 0.01, i * 0.01 + 0.01});
  spans.push_back({1, 3});
  for (int i = 0; i < 100; ++i) spans.push_back({3 + i * 0.01, 3 + i * 0.01 + 0.01});
  const auto boxes = sample_row(spans, 4, 12);
  ASSERT_EQ(boxes.size(), 3u);
  EXPECT_EQ(boxes[0].count(), 100u);
  EXPECT_EQ(boxes[1].count(), 1u);
  EXPECT_EQ(boxes[1].start, 1);
  EXPECT_EQ(boxes[2].count(), 100u);
  EXPECT_DOUBLE_EQ(boxes[2].end, 4);
}

TEST(SampleRow, MergesWithinAGroupFirst) {
  // Forward spans then optimizer spans in one window: two boxes, one per group.
  std::vector<Span> spans;
  for (int i = 0; i < 50; ++i) spans.push_back({i * 0.01, i * 0.01 + 0.01, 0});
  for (int i = 50; i < 60; ++i) spans.push_back({i * 0.01, i * 0.01 + 0.01, 2});
  const auto boxes = sample_row(spans, 1, 6);
  ASSERT_EQ(boxes.size(), 2u);
  EXPECT_EQ(boxes[0].count(), 50u);
  EXPECT_EQ(boxes[1].count(), 10u);
  // A budget of one box merges the groups.
  EXPECT_EQ(sample_row(spans, 1, 1).size(), 1u);
}

TEST(SampleRow, RandomRowsStayWithinTheBudgetAndCoverEverySpan) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    const double step = 10;
    std::vector<Span> spans;
    const int n = std::uniform_int_distribution<int>(1, 3000)(rng);
    const bool overlapping = trial % 3 == 0;  // communication rows may overlap themselves
    double at = 0;
    for (int i = 0; i < n; ++i) {
      const double length = std::exponential_distribution<double>(n / 2.0)(rng);
      const double start = overlapping ? std::uniform_real_distribution<double>(0, step)(rng) : at;
      spans.push_back({std::min(start, step), std::min(start + length, step), i / 97 % 3});
      at = spans.back().end;
    }
    std::ranges::sort(spans, {}, &Span::start);
    const std::size_t budget = std::uniform_int_distribution<std::size_t>(1, 500)(rng);
    const auto boxes = sample_row(spans, step, budget);
    ASSERT_LE(boxes.size(), budget);
    std::size_t next = 0;
    for (const TimelineBox& b : boxes) {
      ASSERT_EQ(b.first, next);
      ASSERT_GT(b.last, b.first);
      for (std::size_t i = b.first; i < b.last; ++i) {
        ASSERT_TRUE(b.start <= spans[i].start && spans[i].end <= b.end);
      }
      next = b.last;
    }
    ASSERT_EQ(next, spans.size());
    if (spans.size() <= budget) {
      EXPECT_EQ(boxes.size(), spans.size());
    }
  }
}

}  // namespace
}  // namespace loom::sim
