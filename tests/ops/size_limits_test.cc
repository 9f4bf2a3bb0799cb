// Sizes from user input that would overflow int64 come back as errors, never as crashes or wrapped
// shapes (each case once crashed, hung or produced a wrong shape).
#include <cmath>
#include <limits>

#include <gtest/gtest.h>

#include "loom/ops/registry.h"

namespace loom::ops {
namespace {

using ir::DType;
using ir::Shape;

Expected<ir::ResolvedOp> resolve(const std::string& type, const ir::Attrs& attrs, std::vector<Shape> shapes) {
  std::vector<DType> dtypes(shapes.size(), DType::f32);
  return ir::resolve_op(*builtin_ops().find(type), attrs, shapes, dtypes);
}

TEST(SizeLimits, ReshapeTargetWhoseProductWrapsIsRejected) {
  // 3 * 6148914691236517206 = 2^64 + 2 wraps to 2, the input's element count.
  auto wrapped = resolve("reshape", {{"shape", std::vector<std::int64_t>{3, 6148914691236517206}}}, {Shape{2}});
  ASSERT_FALSE(wrapped);
  // 2^32 * 2^32 wraps to 0, which once divided by zero; each factor is within the attribute bound.
  auto zero = resolve("reshape", {{"shape", std::vector<std::int64_t>{4294967296, 4294967296, -1}}}, {Shape{2}});
  ASSERT_FALSE(zero);
  EXPECT_NE(zero.error().message.find("more than 2^48 elements"), std::string::npos) << zero.error().message;
}

TEST(SizeLimits, ChunkWithHugeChunkCountGivesOnePart) {
  auto result = resolve("chunk", {{"chunks", std::int64_t{1} << 48}, {"dim", 0}}, {Shape{4, 2}});
  ASSERT_TRUE(result) << result.error().to_string();
  EXPECT_EQ(result->output_shapes.size(), 4u);  // ceil(4 / huge) = 1 row per part
}

TEST(SizeLimits, NanProbabilitiesAndScalesAreRejected) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_FALSE(resolve("dropout", {{"p", nan}}, {Shape{4}}));
  EXPECT_FALSE(resolve("rotary_embedding", {{"base", nan}}, {Shape{1, 2, 4, 8}}));
  EXPECT_FALSE(resolve("scaled_dot_product_attention", {{"scale", nan}}, {Shape{1, 2, 4, 8}, Shape{1, 2, 4, 8}, Shape{1, 2, 4, 8}}));
}

TEST(SizeLimits, OutputsPastTheElementLimitAreRejected) {
  // expand to [2^30, 2^30]: 2^60 elements.
  auto huge = resolve("expand", {{"shape", std::vector<std::int64_t>{1 << 30, 1 << 30}}}, {Shape{1, 1}});
  ASSERT_FALSE(huge);
}

}  // namespace
}  // namespace loom::ops

namespace loom::ops {
namespace {

TEST(SizeLimits, HugeIntegerAttributesAreRejectedBeforeTheyOverflow) {
  const std::int64_t huge = std::numeric_limits<std::int64_t>::max();
  auto padding = resolve("conv2d", {{"padding", std::vector<std::int64_t>{huge}}}, {Shape{2, 3, 8, 8}, Shape{4, 3, 3, 3}});
  ASSERT_FALSE(padding);
  EXPECT_NE(padding.error().message.find("beyond Loom's limit of 2^48"), std::string::npos) << padding.error().message;
  // Bounded factors whose product still overflows: dilation 2^48 times a kernel of 2^20.
  auto dilation = resolve("conv2d", {{"dilation", std::vector<std::int64_t>{std::int64_t{1} << 48}}},
                          {Shape{1, 1, 8, 8}, Shape{1, 1, 1 << 20, 1}});
  ASSERT_FALSE(dilation);
  auto scale = resolve("upsample_nearest2d", {{"scale", std::int64_t{1} << 40}}, {Shape{1, 1, 1 << 20, 1 << 20}});
  ASSERT_FALSE(scale);
  auto split = resolve("split", {{"sizes", std::vector<std::int64_t>{huge, huge, 50}}, {"dim", 1}}, {Shape{2, 48}});
  ASSERT_FALSE(split);
  auto slice = resolve("slice", {{"dim", 1}, {"start", 0}, {"end", 48}, {"step", std::int64_t{1} << 47}}, {Shape{2, 48}});
  ASSERT_TRUE(slice) << slice.error().to_string();
  EXPECT_EQ(slice->output_shapes[0], (Shape{2, 1}));
}

}  // namespace
}  // namespace loom::ops
