#include "loom/ops/registry.h"

#include <gtest/gtest.h>

#include "loom/ir/graph_builder.h"

namespace loom::ops {
namespace {

using ir::DType;
using ir::Shape;

TEST(OpRegistry, RejectsDuplicatesAndMissingSignatures) {
  OpRegistry r;
  EXPECT_TRUE(r.add({.type = "x", .signature = ir::fixed_signature("a -> a")}));
  EXPECT_FALSE(r.add({.type = "x", .signature = ir::fixed_signature("a -> a")}));
  EXPECT_FALSE(r.add({.type = "y"}));
  EXPECT_EQ(r.size(), 1u);
}

TEST(Linalg, MatmulInfersShapesAndFlops) {
  const ir::OpDef* def = builtin_ops().find("matmul");
  ASSERT_NE(def, nullptr);
  std::vector<Shape> shapes = {Shape{4, 8, 16}, Shape{16, 32}};
  std::vector<DType> dtypes = {DType::f32, DType::f32};
  auto resolved = ir::resolve_op(*def, {}, shapes, dtypes);
  ASSERT_TRUE(resolved) << resolved.error().to_string();
  EXPECT_EQ(resolved->annotation_text, "* m k+, k+ n -> * m n");
  EXPECT_EQ(resolved->output_shapes[0], (Shape{4, 8, 32}));
  EXPECT_DOUBLE_EQ(ir::forward_flops(*def, {}, shapes, dtypes, *resolved), 2.0 * 4 * 8 * 16 * 32);
}

TEST(Linalg, MatmulRejectsMismatchedContraction) {
  const ir::OpDef* def = builtin_ops().find("matmul");
  std::vector<Shape> shapes = {Shape{8, 16}, Shape{15, 32}};
  std::vector<DType> dtypes = {DType::f32, DType::f32};
  auto resolved = ir::resolve_op(*def, {}, shapes, dtypes);
  ASSERT_FALSE(resolved);
  EXPECT_NE(resolved.error().message.find("input 1 dim 0 ('k') has size 15, but 'k' is 16 from input 0 dim 1"),
            std::string::npos)
      << resolved.error().message;
}

TEST(Linalg, EinsumMarksContractedIdentifiersAsReductions) {
  const ir::OpDef* def = builtin_ops().find("einsum");
  std::vector<Shape> shapes = {Shape{2, 3, 4}, Shape{2, 4, 5}};
  std::vector<DType> dtypes = {DType::f32, DType::f32};
  ir::Attrs attrs{{"equation", std::string("bij,bjk->bik")}};
  auto resolved = ir::resolve_op(*def, attrs, shapes, dtypes);
  ASSERT_TRUE(resolved) << resolved.error().to_string();
  EXPECT_EQ(resolved->annotation_text, "b i j+, b j+ k -> b i k");
  EXPECT_EQ(resolved->output_shapes[0], (Shape{2, 3, 5}));
}

TEST(Linalg, UnknownAttributeIsNamed) {
  const ir::OpDef* def = builtin_ops().find("matmul");
  std::vector<Shape> shapes = {Shape{8, 16}, Shape{16, 32}};
  std::vector<DType> dtypes = {DType::f32, DType::f32};
  auto resolved = ir::resolve_op(*def, {{"transpose", true}}, shapes, dtypes);
  ASSERT_FALSE(resolved);
  EXPECT_NE(resolved.error().message.find("has no attribute 'transpose'"), std::string::npos);
}

}  // namespace
}  // namespace loom::ops
