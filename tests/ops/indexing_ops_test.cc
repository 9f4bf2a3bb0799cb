// Comparisons, cumsum, index_select, pad and bilinear resizing: the annotations that tell the planner what it may split,
// the output shapes and dtypes, and the errors bad inputs get.
#include <gtest/gtest.h>

#include "op_test_util.h"

namespace loom::ops {
namespace {

using ir::DType;
using ir::Shape;
using testing::resolve;
using List = std::vector<std::int64_t>;

TEST(Comparison, BroadcastsAndGivesBooleansWithoutGradient) {
  for (const char* type : {"eq", "ne", "lt", "le", "gt", "ge"}) {
    auto r = resolve(type, {Shape{2, 16}, Shape{}}, {}, {DType::i64, DType::i64});
    ASSERT_TRUE(r) << type << ": " << r.error().to_string();
    EXPECT_EQ(r->op.annotation_text, "d0 d1,  -> d0 d1") << type;
    EXPECT_EQ(r->op.output_dtypes, std::vector<DType>{DType::boolean}) << type;
    EXPECT_DOUBLE_EQ(r->flops, 32.0) << type;
    EXPECT_FALSE(builtin_ops().find(type)->backward.differentiable) << type;
  }
  auto mixed = resolve("gt", {Shape{4, 1, 8}, Shape{3, 8}});
  ASSERT_TRUE(mixed) << mixed.error().to_string();
  EXPECT_EQ(mixed->op.output_shapes, std::vector<Shape>{Shape({4, 3, 8})});
  EXPECT_ERROR_HAS(resolve("ne", {Shape{4, 8}, Shape{3, 8}}), "ne: shapes [4, 8] and [3, 8] do not broadcast");
  EXPECT_ERROR_HAS(resolve("eq", {Shape{4, 8}}), "eq");
}

TEST(Comparison, MaximumAndMinimumBroadcastAndKeepTheFloatingDtype) {
  for (const char* type : {"maximum", "minimum"}) {
    auto r = resolve(type, {Shape{2, 4, 4}, Shape{}}, {}, {DType::bf16, DType::f32});
    ASSERT_TRUE(r) << type << ": " << r.error().to_string();
    EXPECT_EQ(r->op.annotation_text, "d0 d1 d2,  -> d0 d1 d2") << type;
    EXPECT_EQ(r->op.output_dtypes, std::vector<DType>{DType::bf16}) << type;
    EXPECT_TRUE(builtin_ops().find(type)->backward.differentiable) << type;
  }
}

TEST(Cumsum, FreezesTheScannedDimAndPromotesIntegers) {
  auto ints = resolve("cumsum", {Shape{2, 16}}, {{"dim", std::int64_t{1}}}, {DType::i32});
  ASSERT_TRUE(ints) << ints.error().to_string();
  EXPECT_EQ(ints->op.annotation_text, "d0 d1^ -> d0 d1^");
  EXPECT_EQ(ints->op.output_dtypes, std::vector<DType>{DType::i64});
  auto mask = resolve("cumsum", {Shape{2, 16}}, {{"dim", std::int64_t{-1}}}, {DType::boolean});
  ASSERT_TRUE(mask) << mask.error().to_string();
  EXPECT_EQ(mask->op.output_dtypes, std::vector<DType>{DType::i64});
  auto floats = resolve("cumsum", {Shape{3, 4, 5}}, {{"dim", std::int64_t{0}}}, {DType::bf16});
  ASSERT_TRUE(floats) << floats.error().to_string();
  EXPECT_EQ(floats->op.annotation_text, "d0^ d1 d2 -> d0^ d1 d2");
  EXPECT_EQ(floats->op.output_dtypes, std::vector<DType>{DType::bf16});
  EXPECT_ERROR_HAS(resolve("cumsum", {Shape{2, 16}}, {{"dim", std::int64_t{2}}}), "cumsum");
  EXPECT_ERROR_HAS(resolve("cumsum", {Shape{}}, {{"dim", std::int64_t{0}}}), "cumsum: x is a scalar");
  EXPECT_ERROR_HAS(resolve("cumsum", {Shape{4}}), "dim");
}

TEST(IndexSelect, FreezesTheIndexedDimAndSplitsTheIndex) {
  auto r = resolve("index_select", {Shape{4, 10, 6}, Shape{3}}, {{"dim", std::int64_t{1}}}, {DType::f32, DType::i64});
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->op.annotation_text, "d0 d1^ d2, i -> d0 i d2");
  EXPECT_EQ(r->op.output_shapes, std::vector<Shape>{Shape({4, 3, 6})});
  EXPECT_EQ(r->op.output_dtypes, std::vector<DType>{DType::f32});
  EXPECT_EQ(builtin_ops().find("index_select")->backward.no_grad_inputs, std::vector<int>{1});
  EXPECT_ERROR_HAS(resolve("index_select", {Shape{4, 10}, Shape{3}}, {{"dim", std::int64_t{0}}}, {DType::f32, DType::f32}),
                   "index");
  EXPECT_ERROR_HAS(resolve("index_select", {Shape{4, 10}, Shape{3, 1}}, {{"dim", std::int64_t{0}}}, {DType::f32, DType::i64}),
                   "1-D index");
}

TEST(Pad, GrowsThePaddedDimsAndFreezesThem) {
  // torch order: (left, right) of the last dim, then (top, bottom) of the one before.
  auto r = resolve("pad", {Shape{2, 3, 8, 8}}, {{"pads", List{1, 2, 0, 0}}, {"value", 0.5}});
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->op.annotation_text, "d0 d1 d2 d3^ -> d0 d1 d2 p3^");
  EXPECT_EQ(r->op.output_shapes, std::vector<Shape>{Shape({2, 3, 8, 11})});
  auto both = resolve("pad", {Shape{2, 5, 4}}, {{"pads", List{0, 1, 3, 0}}});
  ASSERT_TRUE(both) << both.error().to_string();
  EXPECT_EQ(both->op.annotation_text, "d0 d1^ d2^ -> d0 p1^ p2^");
  EXPECT_EQ(both->op.output_shapes, std::vector<Shape>{Shape({2, 8, 5})});
  EXPECT_ERROR_HAS(resolve("pad", {Shape{2, 5}}, {{"pads", List{1, 1, 1}}}), "(before, after) pairs");
  EXPECT_ERROR_HAS(resolve("pad", {Shape{2, 5}}, {{"pads", List{1, 1, 1, 1, 1, 1}}}), "'pads' has 6 values");
  EXPECT_ERROR_HAS(resolve("pad", {Shape{2, 5}}, {{"pads", List{-1, 0}}}), "negative padding");
}

TEST(Bilinear, FreezesThePlaneAndTakesTheOutputSize) {
  auto r = resolve("upsample_bilinear2d", {Shape{2, 8, 4, 6}}, {{"output_size", List{9, 3}}, {"align_corners", true}});
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->op.annotation_text, "n c h^ w^ -> n c oh^ ow^");
  EXPECT_EQ(r->op.output_shapes, std::vector<Shape>{Shape({2, 8, 9, 3})});
  EXPECT_DOUBLE_EQ(r->flops, 7.0 * 2 * 8 * 9 * 3);
  EXPECT_ERROR_HAS(resolve("upsample_bilinear2d", {Shape{8, 4, 6}}, {{"output_size", List{9, 3}}}), "[n, c, h, w]");
  EXPECT_ERROR_HAS(resolve("upsample_bilinear2d", {Shape{1, 8, 4, 6}}, {{"output_size", List{0, 3}}}),
                   "two positive sizes");
}

}  // namespace
}  // namespace loom::ops
