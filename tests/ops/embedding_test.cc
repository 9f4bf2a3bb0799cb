#include <gtest/gtest.h>

#include "op_test_util.h"

namespace loom::ops {
namespace {

using ir::DType;
using ir::Shape;
using testing::resolve;

TEST(Embedding, LooksUpRowsInTheWeightDtype) {
  auto r = resolve("embedding", {Shape{8, 512}, Shape{50257, 768}}, {}, {DType::i64, DType::bf16});
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->op.annotation_text, "*, v+ h -> * h");
  EXPECT_EQ(r->op.output_shapes[0], (Shape{8, 512, 768}));
  EXPECT_EQ(r->op.output_dtypes[0], DType::bf16);
  EXPECT_DOUBLE_EQ(r->flops, 0);
  const ir::OpDef* def = builtin_ops().find("embedding");
  EXPECT_EQ(def->backward.no_grad_inputs, std::vector<int>{0});
  // Reads the ids and the selected rows only, then writes the rows.
  const std::vector<Shape> shapes = {Shape{8, 512}, Shape{50257, 768}};
  const std::vector<DType> dtypes = {DType::i64, DType::bf16};
  EXPECT_DOUBLE_EQ(ir::forward_bytes(*def, {}, shapes, dtypes, r->op), 8.0 * 512 * 8 + 2.0 * 8 * 512 * 768 * 2);
}

TEST(Embedding, RejectsFloatIdsAndBadTables) {
  EXPECT_ERROR_HAS(resolve("embedding", {Shape{8}, Shape{100, 16}}, {}, {DType::f32, DType::f32}),
                   "embedding: input 0 (ids) must hold integers, got f32");
  EXPECT_ERROR_HAS(resolve("embedding", {Shape{8}, Shape{100}}, {}, {DType::i64, DType::f32}),
                   "embedding: input 1 must have rank 2 [v, h], got shape [100]");
  EXPECT_ERROR_HAS(resolve("embedding", {Shape{8}, Shape{100, 16}}, {{"padding_idx", std::int64_t{100}}},
                           {DType::i64, DType::f32}),
                   "padding_idx 100 is outside a vocabulary of 100");
}

}  // namespace
}  // namespace loom::ops
