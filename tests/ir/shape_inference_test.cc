#include "loom/ir/shape_inference.h"

#include <gtest/gtest.h>

namespace loom::ir {
namespace {

Annotation parse(std::string_view text) {
  auto a = parse_annotation(text);
  EXPECT_TRUE(a) << a.error().to_string();
  return *a;
}

TEST(InferShapes, Matmul) {
  std::vector<Shape> in = {Shape{8, 16}, Shape{16, 32}};
  auto out = infer_shapes(parse("m k+, k+ n -> m n"), in);
  ASSERT_TRUE(out) << out.error().to_string();
  EXPECT_EQ(out->at(0), (Shape{8, 32}));
}

TEST(InferShapes, VariadicBindsLeadingDims) {
  std::vector<Shape> in = {Shape{4, 128, 768}, Shape{3072, 768}};
  auto binding = bind_dims(parse("* i+, o i+ -> * o"), in);
  ASSERT_TRUE(binding);
  EXPECT_EQ(binding->variadic, (std::vector<std::int64_t>{4, 128}));
  EXPECT_DOUBLE_EQ(binding->iteration_space(), 4.0 * 128 * 768 * 3072);
  auto out = output_shapes(parse("* i+, o i+ -> * o"), *binding);
  EXPECT_EQ(out->at(0), (Shape{4, 128, 3072}));
}

TEST(InferShapes, VariadicOfZeroDims) {
  std::vector<Shape> in = {Shape{768}};
  auto out = infer_shapes(parse("* h -> * h"), in);
  ASSERT_TRUE(out);
  EXPECT_EQ(out->at(0), (Shape{768}));
}

TEST(InferShapes, VariadicMustAgreeAcrossInputs) {
  std::vector<Shape> in = {Shape{2, 3, 4}, Shape{2, 5, 4}};
  auto out = infer_shapes(parse("* h, * h -> * h"), in);
  ASSERT_FALSE(out);
  EXPECT_NE(out.error().message.find("input 1: '*' stands for [2, 5], but for [2, 3] in an earlier input"), std::string::npos)
      << out.error().message;
}

TEST(InferShapes, MergedDimSplitsWithAKnownFactor) {
  std::vector<Shape> in = {Shape{8, 128, 768}};
  auto out = infer_shapes(parse("b s (h d) -> b h s d"), in, {{"h", 12}});
  ASSERT_TRUE(out) << out.error().to_string();
  EXPECT_EQ(out->at(0), (Shape{8, 12, 128, 64}));
}

TEST(InferShapes, MergedDimLearnsFromAnotherInput) {
  // 'h' comes from the second input, so the merged dim of the first can be resolved.
  std::vector<Shape> in = {Shape{96}, Shape{12}};
  auto out = infer_shapes(parse("(h d), h -> h d"), in);
  ASSERT_TRUE(out) << out.error().to_string();
  EXPECT_EQ(out->at(0), (Shape{12, 8}));
}

TEST(InferShapes, MergedDimWithTwoUnknownsIsAnError) {
  std::vector<Shape> in = {Shape{96}};
  auto out = infer_shapes(parse("(h d) -> h d"), in);
  ASSERT_FALSE(out);
  EXPECT_NE(out.error().message.find("the sizes of h, d cannot all be inferred"), std::string::npos) << out.error().message;
}

TEST(InferShapes, MergedDimNotDivisible) {
  std::vector<Shape> in = {Shape{100}};
  auto out = infer_shapes(parse("(h d) -> h d"), in, {{"h", 12}});
  ASSERT_FALSE(out);
  EXPECT_NE(out.error().message.find("input 0 dim 0 has size 100, not divisible by 12 for 'd'"), std::string::npos)
      << out.error().message;
}

TEST(InferShapes, RankMismatchNamesTheInput) {
  std::vector<Shape> in = {Shape{8, 16, 2}, Shape{16, 32}};
  auto out = infer_shapes(parse("m k+, k+ n -> m n"), in);
  ASSERT_FALSE(out);
  EXPECT_NE(out.error().message.find("input 0 has shape [8, 16, 2] (rank 3), the annotation 'm k+' wants rank 2"),
            std::string::npos)
      << out.error().message;
}

TEST(InferShapes, FixedNumberIsChecked) {
  std::vector<Shape> in = {Shape{8, 3}};
  EXPECT_TRUE(infer_shapes(parse("n 3 -> n"), std::vector<Shape>{Shape{8, 3}}));
  auto out = infer_shapes(parse("n 4 -> n"), in);
  ASSERT_FALSE(out);
  EXPECT_NE(out.error().message.find("input 0 dim 1 has size 3, the annotation fixes it to 4"), std::string::npos);
}

TEST(InferShapes, OutputOnlyIdentifierNeedsASize) {
  std::vector<Shape> in = {Shape{8}};
  auto missing = infer_shapes(parse("a -> a c"), in);
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.error().message.find("output 0 needs the size of 'c', which no input has"), std::string::npos);
  auto given = infer_shapes(parse("a -> a c"), in, {{"c", 5}});
  ASSERT_TRUE(given);
  EXPECT_EQ(given->at(0), (Shape{8, 5}));
}

TEST(InferShapes, ScalarOutputAndOpaqueInput) {
  std::vector<Shape> in = {Shape{4, 10}, Shape{}, Shape{4}};
  auto out = infer_shapes(parse("n+ v^, ?, n+ -> "), in);
  ASSERT_TRUE(out) << out.error().to_string();
  EXPECT_EQ(out->at(0), Shape{});
}

TEST(InferShapes, WrongInputCount) {
  std::vector<Shape> in = {Shape{4, 10}};
  auto out = infer_shapes(parse("m k+, k+ n -> m n"), in);
  ASSERT_FALSE(out);
  EXPECT_NE(out.error().message.find("1 inputs given, the annotation has 2"), std::string::npos);
}

}  // namespace
}  // namespace loom::ir
