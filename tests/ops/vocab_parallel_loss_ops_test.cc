// The cross-entropy parts (src/ops/cross_entropy_parts.cc): the vocabulary is a reduction ('v+') in the
// two ops that read logits, so splitting it yields per-token value parts; the final mean is over tokens.
#include <gtest/gtest.h>

#include "op_test_util.h"

namespace loom::ops {
namespace {

using ir::DType;
using ir::Shape;
using testing::resolve;

TEST(VocabParallelLossOps, TheVocabularyIsAReduction) {
  auto target = resolve("target_logit", {Shape{4, 512, 50304}, Shape{4, 512}}, {}, {DType::bf16, DType::i64});
  ASSERT_TRUE(target) << target.error().to_string();
  EXPECT_EQ(target->op.annotation_text, "b s v+, b s -> b s");
  EXPECT_EQ(target->op.output_shapes[0], (Shape{4, 512}));
  EXPECT_EQ(target->op.output_dtypes[0], DType::f32);

  auto parts = resolve("cross_entropy_parts", {Shape{4, 512, 50304}, Shape{4, 512}, Shape{4, 512}}, {},
                       {DType::bf16, DType::i64, DType::f32});
  ASSERT_TRUE(parts) << parts.error().to_string();
  EXPECT_EQ(parts->op.annotation_text, "b s v+, b s, b s -> b s, b s");
  EXPECT_EQ(parts->op.output_dtypes, (std::vector<DType>{DType::f32, DType::f32}));
  EXPECT_DOUBLE_EQ(parts->flops, 4.0 * 4 * 512 * 50304);

  auto flat = resolve("cross_entropy_from_parts", {Shape{2048}, Shape{2048}, Shape{2048}, Shape{2048}}, {},
                      {DType::f32, DType::f32, DType::f32, DType::i64});
  ASSERT_TRUE(flat) << flat.error().to_string();
  EXPECT_EQ(flat->op.annotation_text, "n+, n+, n+, n+ -> ");
  EXPECT_EQ(flat->op.output_shapes[0], Shape{});
}

// Gradients: the labels never; the shift (a stabiliser) neither, in both ops that read it.
TEST(VocabParallelLossOps, TheShiftAndLabelsTakeNoGradient) {
  EXPECT_EQ(builtin_ops().find("target_logit")->backward.no_grad_inputs, std::vector<int>{1});
  EXPECT_EQ(builtin_ops().find("cross_entropy_parts")->backward.no_grad_inputs, (std::vector<int>{1, 2}));
  EXPECT_EQ(builtin_ops().find("cross_entropy_from_parts")->backward.no_grad_inputs, (std::vector<int>{1, 3}));
}

// Without smoothing the target is a pick per token (not a pass over the logits); with it, a sum.
TEST(VocabParallelLossOps, TargetCostsAPickPerTokenUnlessSmoothed) {
  const std::vector<Shape> shapes = {Shape{2, 8, 1000}, Shape{2, 8}};
  const std::vector<DType> dtypes = {DType::bf16, DType::i64};
  const ir::OpDef& def = *builtin_ops().find("target_logit");
  for (const auto& [smoothing, flops, bytes] :
       {std::tuple{0.0, 16.0, 16.0 * (2 + 8 + 4)}, std::tuple{0.1, 16000.0, 16000.0 * 2 + 16.0 * (8 + 4)}}) {
    const ir::Attrs attrs = {{"label_smoothing", smoothing}};
    auto r = resolve("target_logit", shapes, attrs, dtypes);
    ASSERT_TRUE(r) << r.error().to_string();
    EXPECT_DOUBLE_EQ(r->flops, flops) << smoothing;
    EXPECT_DOUBLE_EQ(ir::forward_bytes(def, attrs, shapes, dtypes, r->op), bytes) << smoothing;
  }
}

TEST(VocabParallelLossOps, BadInputsAreNamed) {
  EXPECT_ERROR_HAS(resolve("target_logit", {Shape{4, 10}, Shape{4}}, {}, {DType::f32, DType::f32}),
                   "target_logit: input 1 (labels) must hold integers, got f32");
  EXPECT_ERROR_HAS(resolve("target_logit", {Shape{4, 10}, Shape{5, 2}}, {}, {DType::f32, DType::i64}),
                   "must have the shape of logits");
  EXPECT_ERROR_HAS(resolve("cross_entropy_parts", {Shape{4, 10}, Shape{4}, Shape{4}}, {{"label_smoothing", 1.0}},
                           {DType::f32, DType::i64, DType::f32}),
                   "label_smoothing 1 is outside [0, 1)");
  EXPECT_ERROR_HAS(resolve("cross_entropy_parts", {Shape{4, 10}, Shape{4}, Shape{4}}, {}, {DType::f32, DType::i64, DType::i64}),
                   "input 2 (shift) must be floating");
  EXPECT_ERROR_HAS(resolve("cross_entropy_from_parts", {Shape{4}, Shape{4}, Shape{5}, Shape{4}}, {},
                           {DType::f32, DType::f32, DType::f32, DType::i64}),
                   "input 2 has shape [5]");
  EXPECT_ERROR_HAS(resolve("cross_entropy_from_parts", {Shape{4}, Shape{4}, Shape{4}}, {}, {DType::f32, DType::f32, DType::f32}),
                   "four inputs");
}

}  // namespace
}  // namespace loom::ops
