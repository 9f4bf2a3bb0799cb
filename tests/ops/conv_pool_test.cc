#include <gtest/gtest.h>

#include "loom/ops/registry.h"
#include "op_test_util.h"

namespace loom::ops {
namespace {

using ir::DType;
using ir::Shape;
using IntList = std::vector<std::int64_t>;

using testing::Attempt;

Attempt resolve(const std::string& type, std::vector<Shape> shapes, ir::Attrs attrs = {}) {
  return testing::attempt(type, std::move(shapes), std::move(attrs));
}

TEST(Conv2d, ResNetStemShapeAnnotationAndFlops) {
  const std::int64_t n = 8;
  auto r = resolve("conv2d", {Shape{n, 3, 224, 224}, Shape{64, 3, 7, 7}}, {{"stride", IntList{2}}, {"padding", IntList{3}}});
  ASSERT_TRUE(r.op) << r.op.error().to_string();
  EXPECT_EQ(r.op->annotation_text, "n ci+ h^ w^, co ci+ kh^ kw^ -> n co oh^ ow^");
  EXPECT_EQ(r.op->output_shapes[0], (Shape{n, 64, 112, 112}));
  EXPECT_DOUBLE_EQ(r.flops, 2.0 * 64 * 112 * 112 * 3 * 49 * n);
}

TEST(Conv2d, BiasAndPerAxisAttributes) {
  auto r = resolve("conv2d", {Shape{2, 4, 10, 12}, Shape{6, 4, 3, 1}, Shape{6}},
                   {{"stride", IntList{1, 2}}, {"padding", IntList{1, 0}}, {"dilation", IntList{2, 1}}});
  ASSERT_TRUE(r.op) << r.op.error().to_string();
  EXPECT_EQ(r.op->annotation_text, "n ci+ h^ w^, co ci+ kh^ kw^, co -> n co oh^ ow^");
  // height: (10 + 2 - 2*2 - 1)/1 + 1 = 8; width: (12 - 1)/2 + 1 = 6
  EXPECT_EQ(r.op->output_shapes[0], (Shape{2, 6, 8, 6}));
  const double outputs = 2.0 * 6 * 8 * 6;
  EXPECT_DOUBLE_EQ(r.flops, 2.0 * outputs * 4 * 3 + outputs);
}

TEST(Conv2d, GroupedConvolutionSplitsGroups) {
  auto r = resolve("conv2d", {Shape{1, 8, 5, 5}, Shape{16, 2, 3, 3}}, {{"groups", std::int64_t{4}}, {"padding", IntList{1}}});
  ASSERT_TRUE(r.op) << r.op.error().to_string();
  EXPECT_EQ(r.op->annotation_text, "n (g cig^) h^ w^, (g cog) cig^ kh^ kw^ -> n (g cog) oh^ ow^");
  EXPECT_EQ(r.op->output_shapes[0], (Shape{1, 16, 5, 5}));
  EXPECT_DOUBLE_EQ(r.flops, 2.0 * 16 * 25 * 2 * 9);
}

TEST(Conv2d, RejectsKernelLargerThanInput) {
  auto r = resolve("conv2d", {Shape{1, 3, 4, 4}, Shape{8, 3, 7, 7}});
  ASSERT_FALSE(r.op);
  EXPECT_NE(r.op.error().message.find("output height would be <= 0"), std::string::npos) << r.op.error().message;
}

TEST(Conv2d, RejectsChannelMismatch) {
  auto r = resolve("conv2d", {Shape{1, 3, 8, 8}, Shape{8, 4, 3, 3}});
  ASSERT_FALSE(r.op);
  EXPECT_NE(r.op.error().message.find("input has 3 channels"), std::string::npos) << r.op.error().message;
}

TEST(Conv2d, RejectsBadStrideAndAttributeLength) {
  EXPECT_FALSE(resolve("conv2d", {Shape{1, 3, 8, 8}, Shape{8, 3, 3, 3}}, {{"stride", IntList{0}}}).op);
  EXPECT_FALSE(resolve("conv2d", {Shape{1, 3, 8, 8}, Shape{8, 3, 3, 3}}, {{"stride", IntList{1, 1, 1}}}).op);
  EXPECT_FALSE(resolve("conv2d", {Shape{1, 3, 8, 8}, Shape{8, 3, 3, 3}}, {{"stride", std::int64_t{1}}}).op);
}

TEST(ConvTranspose2d, DoublesResolutionForUNet) {
  auto r = resolve("conv_transpose2d", {Shape{2, 128, 16, 16}, Shape{128, 64, 2, 2}, Shape{64}}, {{"stride", IntList{2}}});
  ASSERT_TRUE(r.op) << r.op.error().to_string();
  EXPECT_EQ(r.op->annotation_text, "n ci+ h^ w^, ci+ co kh^ kw^, co -> n co oh^ ow^");
  EXPECT_EQ(r.op->output_shapes[0], (Shape{2, 64, 32, 32}));
  EXPECT_DOUBLE_EQ(r.flops, 2.0 * 2 * 128 * 16 * 16 * 64 * 4 + 2.0 * 64 * 32 * 32);
  EXPECT_FALSE(resolve("conv_transpose2d", {Shape{2, 128, 16, 16}, Shape{64, 64, 2, 2}}).op);
}

TEST(Pooling, MaxPoolOfResNetStem) {
  auto r = resolve("max_pool2d", {Shape{4, 64, 112, 112}},
                   {{"kernel", IntList{3}}, {"stride", IntList{2}}, {"padding", IntList{1}}});
  ASSERT_TRUE(r.op) << r.op.error().to_string();
  EXPECT_EQ(r.op->annotation_text, "n c h^ w^ -> n c oh^ ow^");
  EXPECT_EQ(r.op->output_shapes[0], (Shape{4, 64, 56, 56}));
  EXPECT_DOUBLE_EQ(r.flops, 4.0 * 64 * 56 * 56 * 9);
}

TEST(Pooling, StrideDefaultsToKernelAndPaddingIsBounded) {
  auto r = resolve("avg_pool2d", {Shape{1, 2, 8, 8}}, {{"kernel", IntList{2}}});
  ASSERT_TRUE(r.op);
  EXPECT_EQ(r.op->output_shapes[0], (Shape{1, 2, 4, 4}));
  EXPECT_FALSE(resolve("avg_pool2d", {Shape{1, 2, 8, 8}}, {{"kernel", IntList{2}}, {"padding", IntList{2}}}).op);
  EXPECT_FALSE(resolve("max_pool2d", {Shape{1, 2, 8, 8}}).op);  // kernel is required
}

TEST(Pooling, AdaptiveAndUpsample) {
  auto pooled = resolve("adaptive_avg_pool2d", {Shape{2, 2048, 7, 7}}, {{"output_size", IntList{1}}});
  ASSERT_TRUE(pooled.op);
  EXPECT_EQ(pooled.op->output_shapes[0], (Shape{2, 2048, 1, 1}));
  EXPECT_DOUBLE_EQ(pooled.flops, 2.0 * 2048 * 49);
  auto up = resolve("upsample_nearest2d", {Shape{1, 3, 5, 6}}, {{"scale", std::int64_t{2}}});
  ASSERT_TRUE(up.op);
  EXPECT_EQ(up.op->output_shapes[0], (Shape{1, 3, 10, 12}));
}

}  // namespace
}  // namespace loom::ops
