#include <gtest/gtest.h>

#include "op_test_util.h"

namespace loom::ops {
namespace {

using ir::DType;
using ir::Shape;
using testing::resolve;

ir::AttrValue ints(std::vector<std::int64_t> values) { return values; }

TEST(Reduce, SumMarksReducedDimsAsReductions) {
  auto r = resolve("sum", {Shape{2, 3, 4}}, {{"dims", ints({1})}});
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->op.annotation_text, "d0 d1+ d2 -> d0 d2");
  EXPECT_EQ(r->op.output_shapes[0], (Shape{2, 4}));
  EXPECT_DOUBLE_EQ(r->flops, 24);
  auto kept = resolve("mean", {Shape{2, 3, 4}}, {{"dims", ints({0, -1})}, {"keepdim", true}});
  ASSERT_TRUE(kept) << kept.error().to_string();
  EXPECT_EQ(kept->op.annotation_text, "d0+ d1 d2+ -> 1 d1 1");
  EXPECT_EQ(kept->op.output_shapes[0], (Shape{1, 3, 1}));
  auto all = resolve("sum", {Shape{5, 6}});
  ASSERT_TRUE(all) << all.error().to_string();
  EXPECT_EQ(all->op.annotation_text, "d0+ d1+ -> ");
  EXPECT_EQ(all->op.output_shapes[0], Shape{});
}

TEST(Reduce, MaxFreezesReducedDims) {
  auto r = resolve("amax", {Shape{2, 3, 4}}, {{"dims", ints({2})}});
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->op.annotation_text, "d0 d1 d2^ -> d0 d1");
  EXPECT_TRUE(resolve("max", {Shape{2, 3}}));
}

TEST(Reduce, ArgmaxGivesIntegersWithoutGradient) {
  auto r = resolve("argmax", {Shape{8, 1000}}, {{"dim", std::int64_t{-1}}});
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->op.annotation_text, "d0 d1^ -> d0");
  EXPECT_EQ(r->op.output_shapes[0], (Shape{8}));
  EXPECT_EQ(r->op.output_dtypes[0], DType::i64);
  EXPECT_FALSE(builtin_ops().find("argmax")->backward.differentiable);
  auto flat = resolve("argmax", {Shape{8, 10}});
  ASSERT_TRUE(flat) << flat.error().to_string();
  EXPECT_EQ(flat->op.annotation_text, "d0^ d1^ -> ");
}

TEST(Reduce, RejectsBadDims) {
  EXPECT_ERROR_HAS(resolve("sum", {Shape{2, 3}}, {{"dims", ints({1, -1})}}), "sum: dim -1 appears twice in 'dims'");
  EXPECT_ERROR_HAS(resolve("mean", {Shape{2, 3}}, {{"dims", ints({2})}}), "mean: dim 2 is out of range for a tensor of rank 2");
  EXPECT_ERROR_HAS(resolve("sum", {Shape{2, 3}}, {{"dims", ints({})}}), "sum: 'dims' is empty");
}

}  // namespace
}  // namespace loom::ops
