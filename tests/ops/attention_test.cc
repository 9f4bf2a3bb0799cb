#include <gtest/gtest.h>

#include "op_test_util.h"

namespace loom::ops {
namespace {

using ir::Shape;
using testing::resolve;

constexpr const char* kSdpa = "scaled_dot_product_attention";

TEST(Attention, MultiHeadCountsTheFullSquare) {
  auto r = resolve(kSdpa, {Shape{2, 12, 128, 64}, Shape{2, 12, 256, 64}, Shape{2, 12, 256, 32}}, {{"causal", true}});
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->op.annotation_text, "b h s d^, b h t^ d^, b h t^ e^ -> b h s e^");
  EXPECT_EQ(r->op.output_shapes[0], (Shape{2, 12, 128, 32}));
  EXPECT_DOUBLE_EQ(r->flops, 2.0 * 2 * 12 * 128 * 256 * 64 + 2.0 * 2 * 12 * 128 * 256 * 32);
}

TEST(Attention, GroupedQueryMergesHeads) {
  auto r = resolve(kSdpa, {Shape{2, 32, 128, 128}, Shape{2, 8, 128, 128}, Shape{2, 8, 128, 128}});
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->op.annotation_text, "b (h r) s d^, b h t^ d^, b h t^ e^ -> b (h r) s e^");
  EXPECT_EQ(r->op.output_shapes[0], (Shape{2, 32, 128, 128}));
  EXPECT_EQ(r->op.dims.size("r"), 4);
  EXPECT_EQ(r->op.dims.size("h"), 8);
  EXPECT_DOUBLE_EQ(r->flops, 4.0 * 2 * 32 * 128 * 128 * 128);
}

TEST(Attention, GroupedQueryNeedsDivisibleHeads) {
  auto r = resolve(kSdpa, {Shape{2, 12, 16, 64}, Shape{2, 5, 16, 64}, Shape{2, 5, 16, 64}});
  EXPECT_ERROR_HAS(r, "12 query heads are not a multiple of 5 key/value heads");
}

TEST(Attention, BiasBroadcastsOverSizeOneDims) {
  auto per_head = resolve(kSdpa, {Shape{2, 4, 16, 8}, Shape{2, 4, 32, 8}, Shape{2, 4, 32, 8}, Shape{4, 16, 32}});
  ASSERT_TRUE(per_head) << per_head.error().to_string();
  EXPECT_EQ(per_head->op.annotation_text, "b h s d^, b h t^ d^, b h t^ e^, h s t^ -> b h s e^");
  auto mask = resolve(kSdpa, {Shape{2, 8, 16, 8}, Shape{2, 2, 16, 8}, Shape{2, 2, 16, 8}, Shape{2, 1, 16, 16}});
  ASSERT_TRUE(mask) << mask.error().to_string();
  EXPECT_EQ(mask->op.annotation_text, "b (h r) s d^, b h t^ d^, b h t^ e^, b 1 s t^ -> b (h r) s e^");
  EXPECT_ERROR_HAS(resolve(kSdpa, {Shape{2, 4, 16, 8}, Shape{2, 4, 32, 8}, Shape{2, 4, 32, 8}, Shape{4, 16, 16}}),
                   "('t') has size 16, but 't' is 32");
}

TEST(Attention, ChecksRanksAndHeadSizes) {
  EXPECT_ERROR_HAS(resolve(kSdpa, {Shape{2, 16, 64}, Shape{2, 16, 64}, Shape{2, 16, 64}}),
                   "scaled_dot_product_attention: input 0 must have rank 4 [b, hq, s, d] (q), got shape [2, 16, 64]");
  EXPECT_ERROR_HAS(resolve(kSdpa, {Shape{2, 4, 16, 64}, Shape{2, 4, 16, 32}, Shape{2, 4, 16, 64}}),
                   "('d') has size 32, but 'd' is 64");
  EXPECT_ERROR_HAS(resolve(kSdpa, {Shape{2, 4, 16, 64}, Shape{2, 4, 16, 64}, Shape{2, 4, 16, 64}}, {{"dropout", 1.5}}),
                   "dropout 1.5 is outside [0, 1)");
}

TEST(Attention, RotaryNeedsAnEvenHeadDim) {
  auto r = resolve("rotary_embedding", {Shape{2, 8, 128, 64}}, {{"base", 500000.0}});
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->op.annotation_text, "b h s d^ -> b h s d^");
  EXPECT_EQ(r->op.output_shapes[0], (Shape{2, 8, 128, 64}));
  EXPECT_ERROR_HAS(resolve("rotary_embedding", {Shape{2, 8, 128, 63}}), "rotary_embedding: head dim 63 is odd");
  EXPECT_ERROR_HAS(resolve("rotary_embedding", {Shape{8, 128, 64}}), "must have rank 4 [b, h, s, d]");
}

// Eager attention's mask: every dim of the scores splits (a slice knows its offsets), nothing is saved for
// the backward, and the FLOPs are one select per element.
TEST(Attention, CausalMaskSplitsEveryDimAndSavesNothing) {
  auto r = resolve("causal_mask", {Shape{2, 8, 128, 256}});
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->op.annotation_text, "* s t -> * s t");
  EXPECT_EQ(r->op.output_shapes[0], (Shape{2, 8, 128, 256}));
  const ir::OpDef* def = builtin_ops().find("causal_mask");
  ASSERT_NE(def, nullptr);
  EXPECT_FALSE(def->backward.saves_inputs);
  EXPECT_FALSE(def->backward.saves_outputs);
  EXPECT_ERROR_HAS(resolve("causal_mask", {Shape{16}}), "causal_mask: scores must have rank >= 2");
}

}  // namespace
}  // namespace loom::ops
