// topk: the annotation that keeps the ranked dim whole and lets every other dim split, the two
// outputs' shapes and dtypes, and the errors bad inputs get.
#include <gtest/gtest.h>

#include "op_test_util.h"

namespace loom::ops {
namespace {

using ir::DType;
using ir::Shape;
using testing::resolve;

TEST(Topk, FreezesTheRankedDimAndSplitsTheRows) {
  auto r = resolve("topk", {Shape{2, 16, 8}}, {{"k", std::int64_t{2}}}, {DType::bf16});
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->op.annotation_text, "d0 d1 d2^ -> d0 d1 k^, d0 d1 k^");
  EXPECT_EQ(r->op.output_shapes, (std::vector<Shape>{Shape{2, 16, 2}, Shape{2, 16, 2}}));
  EXPECT_EQ(r->op.output_dtypes, (std::vector<DType>{DType::bf16, DType::i64}));
  EXPECT_DOUBLE_EQ(r->flops, 256.0);
  auto first = resolve("topk", {Shape{5, 3}}, {{"k", std::int64_t{5}}, {"dim", std::int64_t{0}}});
  ASSERT_TRUE(first) << first.error().to_string();
  EXPECT_EQ(first->op.annotation_text, "d0^ d1 -> k^ d1, k^ d1");
  EXPECT_TRUE(builtin_ops().find("topk")->backward.differentiable);
  EXPECT_TRUE(builtin_ops().find("topk")->backward.no_grad_inputs.empty());
}

TEST(Topk, RefusesAKLargerThanTheDimAndAScalar) {
  EXPECT_ERROR_HAS(resolve("topk", {Shape{4, 8}}, {{"k", std::int64_t{9}}}), "topk: k 9 is outside [0, 8]");
  EXPECT_ERROR_HAS(resolve("topk", {Shape{4, 8}}, {{"k", std::int64_t{-1}}}), "topk: k -1");
  EXPECT_ERROR_HAS(resolve("topk", {Shape{}}, {{"k", std::int64_t{1}}}), "topk: x is a scalar");
  EXPECT_ERROR_HAS(resolve("topk", {Shape{4, 8}}, {{"k", std::int64_t{1}}, {"dim", std::int64_t{2}}}), "topk");
  EXPECT_ERROR_HAS(resolve("topk", {Shape{4, 8}}), "k");
}

}  // namespace
}  // namespace loom::ops
