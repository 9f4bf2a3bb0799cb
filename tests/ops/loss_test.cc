#include <gtest/gtest.h>

#include "op_test_util.h"

namespace loom::ops {
namespace {

using ir::DType;
using ir::Shape;
using testing::resolve;

TEST(Loss, CrossEntropyIsAScalarF32Mean) {
  auto r = resolve("cross_entropy", {Shape{4, 512, 50257}, Shape{4, 512}}, {{"ignore_index", std::int64_t{-100}}},
                   {DType::bf16, DType::i64});
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->op.annotation_text, "b+ s+ v^, b+ s+ -> ");
  EXPECT_EQ(r->op.output_shapes[0], Shape{});
  EXPECT_EQ(r->op.output_dtypes[0], DType::f32);
  EXPECT_DOUBLE_EQ(r->flops, 5.0 * 4 * 512 * 50257);
  EXPECT_EQ(builtin_ops().find("cross_entropy")->backward.no_grad_inputs, (std::vector<int>{1, 2}));
}

// The third input, the whole batch's counted tokens, is a scalar no split divides; anything else is refused.
TEST(Loss, CrossEntropyTakesTheCountedTokensWhole) {
  auto r = resolve("cross_entropy", {Shape{8, 5}, Shape{8}, Shape{}}, {}, {DType::f32, DType::i64, DType::f32});
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->op.annotation_text, "n+ v^, n+,  -> ");
  auto vector = resolve("nll_loss", {Shape{8, 5}, Shape{8}, Shape{8}}, {}, {DType::f32, DType::i64, DType::f32});
  ASSERT_FALSE(vector);
  EXPECT_EQ(vector.error().message, "nll_loss: the counted tokens (input 2) must be a floating scalar, got f32 [8]");
}

TEST(Loss, CrossEntropyNamesTokenDimsPerRank) {
  auto flat = resolve("cross_entropy", {Shape{2048, 1000}, Shape{2048}}, {}, {DType::f32, DType::i64});
  ASSERT_TRUE(flat) << flat.error().to_string();
  EXPECT_EQ(flat->op.annotation_text, "n+ v^, n+ -> ");
  auto deep = resolve("nll_loss", {Shape{2, 3, 4, 10}, Shape{2, 3, 4}}, {}, {DType::f32, DType::i32});
  ASSERT_TRUE(deep) << deep.error().to_string();
  EXPECT_EQ(deep->op.annotation_text, "d0+ d1+ d2+ v^, d0+ d1+ d2+ -> ");
  EXPECT_DOUBLE_EQ(deep->flops, 24);
}

TEST(Loss, CrossEntropyChecksLabels) {
  EXPECT_ERROR_HAS(resolve("cross_entropy", {Shape{4, 10}, Shape{4}}, {}, {DType::f32, DType::f32}),
                   "cross_entropy: input 1 (labels) must hold integers, got f32");
  EXPECT_ERROR_HAS(resolve("cross_entropy", {Shape{4, 8, 10}, Shape{32}}, {}, {DType::f32, DType::i64}),
                   "labels [32] must have the shape of logits [4, 8, 10] without its last dim");
  EXPECT_ERROR_HAS(resolve("cross_entropy", {Shape{4, 10}, Shape{5}}, {}, {DType::f32, DType::i64}),
                   "('n') has size 5, but 'n' is 4");
  EXPECT_ERROR_HAS(resolve("cross_entropy", {Shape{4, 10}, Shape{4}}, {{"label_smoothing", 1.0}},
                           {DType::f32, DType::i64}),
                   "label_smoothing 1 is outside [0, 1)");
}

TEST(Loss, MseLossReducesEveryDim) {
  auto r = resolve("mse_loss", {Shape{8, 3}, Shape{8, 3}}, {}, {DType::f16, DType::f16});
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->op.annotation_text, "d0+ d1+, d0+ d1+ -> ");
  EXPECT_EQ(r->op.output_dtypes[0], DType::f32);
  EXPECT_DOUBLE_EQ(r->flops, 72);
  EXPECT_ERROR_HAS(resolve("mse_loss", {Shape{8, 3}, Shape{8, 4}}), "('d1') has size 4, but 'd1' is 3");
}

}  // namespace
}  // namespace loom::ops
