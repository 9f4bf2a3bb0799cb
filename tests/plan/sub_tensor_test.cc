#include "loom/plan/sub_tensor.h"

#include <random>

#include <gtest/gtest.h>

namespace loom::plan {
namespace {

const ir::TensorId kT(0);

SubTensor piece(std::vector<IndexRange> box, ValuePart value = ValuePart::whole()) { return {kT, std::move(box), value}; }

TEST(ValuePart, NestingAndIntervals) {
  EXPECT_EQ(nested({1, 2}, {1, 2}), (ValuePart{3, 4}));
  EXPECT_TRUE(value_overlaps({0, 1}, {3, 4}));
  EXPECT_FALSE(value_overlaps({0, 2}, {1, 2}));
  EXPECT_TRUE(value_contains({1, 2}, {3, 4}));
  EXPECT_FALSE(value_contains({1, 2}, {1, 4}));
}

TEST(SubTensor, DependencyIsBoxAndValueOverlap) {
  const SubTensor a = piece({{0, 4, 1}, {0, 8, 1}});
  const SubTensor b = piece({{2, 6, 1}, {0, 8, 2}});
  EXPECT_TRUE(overlaps(a, b));
  EXPECT_FALSE(overlaps(a, piece({{4, 8, 1}, {0, 8, 1}})));
  EXPECT_FALSE(overlaps(piece({{0, 4, 1}}, {0, 2}), piece({{0, 4, 1}}, {1, 2})));
  EXPECT_EQ(a.to_string(), "%0[0:4, 0:8]");
  EXPECT_EQ(piece({{1, 8, 2}}, {1, 2}).to_string(), "%0[1:8:2] (1 of 2)");
}

TEST(Coverage, ColumnSplitCovers) {
  const SubTensor consumer = SubTensor::whole(kT, ir::Shape{4, 8});
  std::vector<SubTensor> producers = {piece({{0, 4, 1}, {0, 4, 1}}), piece({{0, 4, 1}, {4, 8, 1}})};
  EXPECT_TRUE(check_coverage(consumer, producers, "x"));
}

TEST(Coverage, MissingValuePartIsNamed) {
  const SubTensor consumer = SubTensor::whole(kT, ir::Shape{4, 8});
  std::vector<SubTensor> producers = {piece({{0, 4, 1}, {0, 8, 1}}, {0, 2})};
  auto result = check_coverage(consumer, producers, "x");
  ASSERT_FALSE(result);
  EXPECT_NE(result.error().message.find("tensor 'x' elements [0:4, 0:8] are not fully produced: the producers there hold value parts [0 of 2]"),
            std::string::npos)
      << result.error().message;
}

TEST(Coverage, StraddlingValuePartsDoNotSum) {
  const SubTensor consumer = SubTensor::whole(kT, ir::Shape{2});
  // [0, 1/2) and [1/4, 3/4) and [3/4, 1): no disjoint tiling.
  std::vector<SubTensor> producers = {piece({{0, 2, 1}}, {0, 2}), piece({{0, 2, 1}}, {1, 4}), piece({{0, 2, 1}}, {3, 4})};
  // ... but [0,1/2) + a part covering [1/2,1) exists only if some interval starts at 1/2: none does.
  EXPECT_FALSE(check_coverage(consumer, producers, "x"));
  producers.push_back(piece({{0, 2, 1}}, {2, 4}));
  EXPECT_TRUE(check_coverage(consumer, producers, "x"));
}

TEST(Coverage, ScalarTensor) {
  const SubTensor consumer = SubTensor::whole(kT, ir::Shape{});
  std::vector<SubTensor> halves = {piece({}, {0, 2}), piece({}, {1, 2})};
  EXPECT_TRUE(check_coverage(consumer, halves, "loss"));
  EXPECT_FALSE(check_coverage(consumer, std::span<const SubTensor>(halves).first(1), "loss"));
}

// Random exact partitions of a box: recursive splits along random dims (even or strided) or of the
// value, down to a random depth. They must cover; dropping any one piece must not; adding replicas
// of pieces must still cover.
class PartitionGenerator {
 public:
  explicit PartitionGenerator(std::uint32_t seed) : rng_(seed) {}

  std::vector<SubTensor> partition(const SubTensor& root, int depth) {
    std::vector<SubTensor> out;
    split(root, depth, out);
    return out;
  }

  std::mt19937& rng() { return rng_; }

 private:
  void split(const SubTensor& s, int depth, std::vector<SubTensor>& out) {
    if (depth == 0 || std::uniform_int_distribution<int>(0, 3)(rng_) == 0) {
      out.push_back(s);
      return;
    }
    const std::int64_t parts = std::uniform_int_distribution<std::int64_t>(2, 3)(rng_);
    const int choice = std::uniform_int_distribution<int>(0, static_cast<int>(s.box.size()))(rng_);
    const bool strided = std::uniform_int_distribution<int>(0, 1)(rng_) == 1;  // one style for all siblings
    for (std::int64_t k = 0; k < parts; ++k) {
      SubTensor child = s;
      if (choice == static_cast<int>(s.box.size())) {
        child.value = nested(s.value, {k, parts});
      } else {
        const IndexRange& r = s.box[static_cast<std::size_t>(choice)];
        if (r.size() % parts != 0) {
          out.push_back(s);
          return;
        }
        child.box[static_cast<std::size_t>(choice)] = split_range(r, parts, k, strided);
      }
      split(child, depth - 1, out);
    }
  }

  std::mt19937 rng_;
};

std::string describe(const std::vector<SubTensor>& pieces) {
  std::string text;
  for (const SubTensor& p : pieces) text += "\n  " + p.to_string();
  return text;
}

TEST(CoverageProperty, RandomPartitionsCoverAndAMissingPieceIsCaught) {
  const std::uint32_t seed = 2026;
  PartitionGenerator generator(seed);
  const SubTensor whole = SubTensor::whole(kT, ir::Shape{12, 8, 6});
  int dropped_checked = 0;
  for (int i = 0; i < 300; ++i) {
    std::vector<SubTensor> pieces = generator.partition(whole, 4);
    auto covered = check_coverage(whole, pieces, "t");
    ASSERT_TRUE(covered) << "seed " << seed << " case " << i << ": " << covered.error().message << describe(pieces);
    // Replicas do not break coverage.
    std::vector<SubTensor> with_replica = pieces;
    with_replica.push_back(pieces[std::uniform_int_distribution<std::size_t>(0, pieces.size() - 1)(generator.rng())]);
    ASSERT_TRUE(check_coverage(whole, with_replica, "t")) << "seed " << seed << " case " << i;
    if (pieces.size() < 2) continue;
    std::vector<SubTensor> missing = pieces;
    missing.erase(missing.begin() + static_cast<std::ptrdiff_t>(
                                        std::uniform_int_distribution<std::size_t>(0, pieces.size() - 1)(generator.rng())));
    ASSERT_FALSE(check_coverage(whole, missing, "t")) << "seed " << seed << " case " << i << ": a dropped piece went unnoticed";
    ++dropped_checked;
  }
  EXPECT_GT(dropped_checked, 150);
}

TEST(CoverageProperty, SubBoxConsumersOfARandomPartition) {
  const std::uint32_t seed = 99;
  PartitionGenerator generator(seed);
  const SubTensor whole = SubTensor::whole(kT, ir::Shape{16, 9});
  for (int i = 0; i < 200; ++i) {
    std::vector<SubTensor> pieces = generator.partition(whole, 3);
    // Any consumer box (even strided) inside the tensor is covered by the full partition.
    auto& rng = generator.rng();
    std::uniform_int_distribution<std::int64_t> step(1, 3);
    SubTensor consumer = piece({IndexRange{std::uniform_int_distribution<std::int64_t>(0, 7)(rng), 16, step(rng)},
                                IndexRange{std::uniform_int_distribution<std::int64_t>(0, 4)(rng), 9, step(rng)}});
    ASSERT_TRUE(check_coverage(consumer, pieces, "t")) << "seed " << seed << " case " << i << ": " << consumer.to_string();
  }
}

}  // namespace
}  // namespace loom::plan
