// The batch-norm parts (src/ops/batch_norm_parts.cc): the statistics ops reduce over the batch and the
// spatial dims ('+'), so a batch split leaves per-channel value parts; the normalization splits every
// dim; the count and the centering mean take no gradient.
#include <gtest/gtest.h>

#include "op_test_util.h"

namespace loom::ops {
namespace {

using ir::DType;
using ir::Shape;
using testing::resolve;

TEST(BatchNormPartsOps, StatisticsReduceOverBatchAndSpace) {
  auto sums = resolve("batch_norm_sums", {Shape{8, 16, 32, 32}}, {}, {DType::bf16});
  ASSERT_TRUE(sums) << sums.error().to_string();
  EXPECT_EQ(sums->op.annotation_text, "n+ c h+ w+ -> c, c");
  EXPECT_EQ(sums->op.output_shapes, (std::vector<Shape>{Shape{16}, Shape{16}}));
  EXPECT_EQ(sums->op.output_dtypes, (std::vector<DType>{DType::f32, DType::f32}));
  EXPECT_DOUBLE_EQ(sums->flops, 8.0 * 16 * 32 * 32);

  auto squares = resolve("batch_norm_centered_sums", {Shape{8, 16, 40}, Shape{16}, Shape{16}});
  ASSERT_TRUE(squares) << squares.error().to_string();
  EXPECT_EQ(squares->op.annotation_text, "n+ c l+, c, c -> c");
  EXPECT_EQ(squares->op.output_shapes[0], Shape{16});
  EXPECT_DOUBLE_EQ(squares->flops, 3.0 * 8 * 16 * 40);

  auto planar = resolve("batch_norm_sums", {Shape{4, 3, 2, 5, 5}});
  ASSERT_TRUE(planar) << planar.error().to_string();
  EXPECT_EQ(planar->op.annotation_text, "n+ c d+ h+ w+ -> c, c");
  auto flat = resolve("batch_norm_sums", {Shape{4, 3}});
  ASSERT_TRUE(flat) << flat.error().to_string();
  EXPECT_EQ(flat->op.annotation_text, "n+ c -> c, c");
}

TEST(BatchNormPartsOps, NormalizationSplitsEveryDim) {
  const Shape c{16};
  auto y = resolve("batch_norm_from_sums", {Shape{8, 16, 32, 32}, c, c, c, c, c}, {{"eps", 1e-3}},
                   {DType::bf16, DType::f32, DType::f32, DType::f32, DType::bf16, DType::bf16});
  ASSERT_TRUE(y) << y.error().to_string();
  EXPECT_EQ(y->op.annotation_text, "n c h w, c, c, c, c, c -> n c h w");
  EXPECT_EQ(y->op.output_shapes[0], (Shape{8, 16, 32, 32}));
  EXPECT_EQ(y->op.output_dtypes[0], DType::bf16);
  EXPECT_DOUBLE_EQ(y->flops, 4.0 * 8 * 16 * 32 * 32);
}

TEST(BatchNormPartsOps, CountAndMeanTakeNoGradient) {
  EXPECT_TRUE(builtin_ops().find("batch_norm_sums")->backward.no_grad_inputs.empty());
  EXPECT_EQ(builtin_ops().find("batch_norm_centered_sums")->backward.no_grad_inputs, (std::vector<int>{1, 2}));
  EXPECT_EQ(builtin_ops().find("batch_norm_from_sums")->backward.no_grad_inputs, std::vector<int>{3});
  // The whole op keeps its batch frozen: it cannot split n without the parts' exchanges.
  auto whole = resolve("batch_norm", {Shape{8, 16, 4, 4}, Shape{16}, Shape{16}});
  ASSERT_TRUE(whole) << whole.error().to_string();
  EXPECT_EQ(whole->op.annotation_text, "n^ c h^ w^, c, c -> n^ c h^ w^");
}

TEST(BatchNormPartsOps, BadInputsAreNamed) {
  EXPECT_ERROR_HAS(resolve("batch_norm_sums", {Shape{8}}), "batch_norm_sums: input 0 must be [n, c, ...] of rank >= 2");
  EXPECT_ERROR_HAS(resolve("batch_norm_sums", {Shape{8, 4}}, {}, {DType::i64}), "batch_norm_sums: input 0 must be floating");
  EXPECT_ERROR_HAS(resolve("batch_norm_centered_sums", {Shape{8, 4, 2}, Shape{4}, Shape{5}}),
                   "batch_norm_centered_sums: input 2 has shape [5], expected [4]");
  EXPECT_ERROR_HAS(resolve("batch_norm_from_sums", {Shape{8, 4, 2}, Shape{4}, Shape{4}, Shape{4}, Shape{4}}),
                   "batch_norm_from_sums");
}

}  // namespace
}  // namespace loom::ops
