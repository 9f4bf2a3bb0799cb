#include <gtest/gtest.h>

#include "op_test_util.h"

namespace loom::ops {
namespace {

using ir::Shape;
using testing::resolve;

TEST(Activation, GeluCountsEightFlopsPerElement) {
  auto r = resolve("gelu", {Shape{2, 16, 64}}, {{"approximate", std::string("tanh")}});
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->op.annotation_text, "* -> *");
  EXPECT_EQ(r->op.output_shapes[0], (Shape{2, 16, 64}));
  EXPECT_DOUBLE_EQ(r->flops, 8.0 * 2 * 16 * 64);
  EXPECT_ERROR_HAS(resolve("gelu", {Shape{4}}, {{"approximate", std::string("erf")}}),
                   "gelu: attribute 'approximate' is 'erf'");
}

TEST(Activation, ReluSavesItsOutput) {
  const ir::OpDef* relu = builtin_ops().find("relu");
  ASSERT_NE(relu, nullptr);
  EXPECT_TRUE(relu->backward.saves_outputs);
  EXPECT_FALSE(relu->backward.saves_inputs);
}

TEST(Activation, GatedUnitsNeedEqualShapes) {
  auto r = resolve("swiglu", {Shape{4, 128, 1024}, Shape{4, 128, 1024}});
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->op.annotation_text, "* f, * f -> * f");
  EXPECT_EQ(r->op.output_shapes[0], (Shape{4, 128, 1024}));
  EXPECT_DOUBLE_EQ(r->flops, 5.0 * 4 * 128 * 1024);
  EXPECT_ERROR_HAS(resolve("geglu", {Shape{4, 1024}, Shape{4, 512}}), "('f') has size 512, but 'f' is 1024");
}

TEST(Activation, SoftmaxFreezesItsDim) {
  auto last = resolve("softmax", {Shape{2, 8, 16}});
  ASSERT_TRUE(last) << last.error().to_string();
  EXPECT_EQ(last->op.annotation_text, "d0 d1 d2^ -> d0 d1 d2^");
  EXPECT_DOUBLE_EQ(last->flops, 5.0 * 2 * 8 * 16);
  auto middle = resolve("log_softmax", {Shape{2, 8, 16}}, {{"dim", std::int64_t{1}}});
  ASSERT_TRUE(middle) << middle.error().to_string();
  EXPECT_EQ(middle->op.annotation_text, "d0 d1^ d2 -> d0 d1^ d2");
  EXPECT_TRUE(builtin_ops().find("softmax")->backward.saves_outputs);
  EXPECT_ERROR_HAS(resolve("softmax", {Shape{2, 8}}, {{"dim", std::int64_t{2}}}),
                   "softmax: dim 2 is out of range for a tensor of rank 2");
}

TEST(Activation, DropoutChecksProbability) {
  auto r = resolve("dropout", {Shape{8, 32}}, {{"p", 0.1}});
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->op.output_shapes[0], (Shape{8, 32}));
  EXPECT_DOUBLE_EQ(r->flops, 256);
  EXPECT_ERROR_HAS(resolve("dropout", {Shape{8}}, {{"p", 1.0}}), "dropout: probability p = 1 is outside [0, 1)");
  EXPECT_ERROR_HAS(resolve("dropout", {Shape{8}}, {{"p", std::string("x")}}), "attribute 'p' of op type 'dropout' must be real");
}

}  // namespace
}  // namespace loom::ops
