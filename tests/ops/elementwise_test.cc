#include <gtest/gtest.h>

#include "op_test_util.h"

namespace loom::ops {
namespace {

using ir::DType;
using ir::Shape;
using testing::resolve;

struct BroadcastCase {
  std::vector<Shape> shapes;
  std::string annotation;
  Shape output;
};

class AddBroadcast : public ::testing::TestWithParam<BroadcastCase> {};

TEST_P(AddBroadcast, NamesRealDimsAndFixesBroadcastOnes) {
  const BroadcastCase& c = GetParam();
  auto r = resolve("add", c.shapes);
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->op.annotation_text, c.annotation);
  EXPECT_EQ(r->op.output_shapes, std::vector<Shape>{c.output});
  EXPECT_DOUBLE_EQ(r->flops, static_cast<double>(c.output.numel()));
}

INSTANTIATE_TEST_SUITE_P(
    Cases, AddBroadcast,
    ::testing::Values(BroadcastCase{{Shape{4, 8}, Shape{4, 8}}, "d0 d1, d0 d1 -> d0 d1", Shape{4, 8}},
                      BroadcastCase{{Shape{2, 4, 8}, Shape{8}}, "d0 d1 d2, d2 -> d0 d1 d2", Shape{2, 4, 8}},
                      BroadcastCase{{Shape{4, 1, 8}, Shape{3, 8}}, "d0 1 d2, d1 d2 -> d0 d1 d2", Shape{4, 3, 8}},
                      BroadcastCase{{Shape{1, 1}, Shape{1}}, "d0 d1, d1 -> d0 d1", Shape{1, 1}},
                      BroadcastCase{{Shape{4, 8}, Shape{}}, "d0 d1,  -> d0 d1", Shape{4, 8}}));

TEST(Elementwise, IncompatibleBroadcastNamesBothShapes) {
  auto r = resolve("mul", {Shape{4, 8}, Shape{3, 8}});
  EXPECT_ERROR_HAS(r, "mul: shapes [4, 8] and [3, 8] do not broadcast (size 3 against 4 at output dim 0)");
}

TEST(Elementwise, BinaryOpsNeedTwoInputs) {
  auto r = resolve("sub", {Shape{4}});
  EXPECT_ERROR_HAS(r, "sub takes two inputs (a, b), got 1 inputs");
}

TEST(Elementwise, ScaleNeedsItsFactor) {
  EXPECT_ERROR_HAS(resolve("scale", {Shape{4}}), "op type 'scale' needs attribute 'factor'");
  auto r = resolve("scale", {Shape{2, 3}}, {{"factor", 0.5}});
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->op.annotation_text, "* -> *");
  EXPECT_EQ(r->op.output_shapes[0], (Shape{2, 3}));
  EXPECT_DOUBLE_EQ(r->flops, 6);
}

TEST(Elementwise, UnaryOpsKeepShapeAndDtype) {
  for (const char* type : {"neg", "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "abs", "square", "reciprocal", "acos"}) {
    auto r = resolve(type, {Shape{3, 5}}, {}, {DType::bf16});
    ASSERT_TRUE(r) << type << ": " << r.error().to_string();
    EXPECT_EQ(r->op.output_shapes[0], (Shape{3, 5})) << type;
    EXPECT_EQ(r->op.output_dtypes[0], DType::bf16) << type;
  }
}

TEST(Elementwise, RemainderNeedsANonZeroDivisorAndKeepsTheDtype) {
  EXPECT_ERROR_HAS(resolve("remainder", {Shape{4}}), "needs attribute 'divisor'");
  EXPECT_ERROR_HAS(resolve("remainder", {Shape{4}}, {{"divisor", 0.0}}), "remainder: attribute 'divisor' is 0");
  auto r = resolve("remainder", {Shape{2, 16}}, {{"divisor", 16384.0}}, {DType::i64});
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->op.annotation_text, "* -> *");  // elementwise: every dim splits
  EXPECT_EQ(r->op.output_dtypes[0], DType::i64);
}

TEST(Elementwise, ClampChecksItsBounds) {
  EXPECT_TRUE(resolve("clamp", {Shape{4}}, {{"min", 0.0}}));
  EXPECT_ERROR_HAS(resolve("clamp", {Shape{4}}, {{"min", 2.0}, {"max", 1.0}}), "clamp: min 2 is greater than max 1");
}

TEST(Elementwise, WhereTakesABoolConditionAndBroadcasts) {
  auto r = resolve("where", {Shape{1, 8}, Shape{4, 8}, Shape{}}, {}, {DType::boolean, DType::f16, DType::f16});
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->op.annotation_text, "1 d1, d0 d1,  -> d0 d1");
  EXPECT_EQ(r->op.output_dtypes[0], DType::f16);
  // Integer values stay integers (RoBERTa's token types gathered at traced positions), not the condition's bool.
  auto ints = resolve("where", {Shape{4, 8}, Shape{4, 8}, Shape{}}, {}, {DType::boolean, DType::i64, DType::i64});
  ASSERT_TRUE(ints) << ints.error().to_string();
  EXPECT_EQ(ints->op.output_dtypes[0], DType::i64);
  EXPECT_EQ(builtin_ops().find("where")->backward.no_grad_inputs, std::vector<int>{0});
  EXPECT_ERROR_HAS(resolve("where", {Shape{4}, Shape{4}, Shape{4}}), "where: input 0 (cond) must be bool, got f32");
}

TEST(Elementwise, MaskedFillBroadcastsTheMaskOnly) {
  auto r = resolve("masked_fill", {Shape{2, 4, 8, 8}, Shape{8, 8}}, {{"value", -1e9}}, {DType::f32, DType::boolean});
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->op.annotation_text, "d0 d1 d2 d3, d2 d3 -> d0 d1 d2 d3");
  auto bad = resolve("masked_fill", {Shape{8}, Shape{4, 8}}, {{"value", 0.0}}, {DType::f32, DType::boolean});
  EXPECT_ERROR_HAS(bad, "masked_fill: mask [4, 8] would broadcast x [8] to a larger shape");
}

TEST(Elementwise, CastGivesTheRequestedDtype) {
  auto r = resolve("cast", {Shape{4, 4}}, {{"dtype", std::string("f32")}}, {DType::bf16});
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->op.output_dtypes[0], DType::f32);
  EXPECT_DOUBLE_EQ(r->flops, 0);
  EXPECT_ERROR_HAS(resolve("cast", {Shape{4}}, {{"dtype", std::string("f33")}}), "cast: attribute 'dtype' = 'f33' is not a dtype");
}

}  // namespace
}  // namespace loom::ops
