#include <gtest/gtest.h>

#include "op_test_util.h"

namespace loom::ops {
namespace {

using ir::DType;
using ir::Shape;
using testing::resolve;

TEST(Moe, GateGivesCombineWeightsAndABoolMask) {
  auto r = resolve("moe_gate", {Shape{4, 1024, 512}, Shape{8, 512}}, {{"capacity", std::int64_t{256}}},
                   {DType::bf16, DType::bf16});
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->op.annotation_text, "g t^ h^, e^ h^ -> g t^ e^ c^, g t^ e^ c^");
  EXPECT_EQ(r->op.output_shapes, (std::vector<Shape>{Shape{4, 1024, 8, 256}, Shape{4, 1024, 8, 256}}));
  EXPECT_EQ(r->op.output_dtypes, (std::vector<DType>{DType::bf16, DType::boolean}));
  EXPECT_DOUBLE_EQ(r->flops, 2.0 * 4 * 1024 * 512 * 8 + 5.0 * 4 * 1024 * 8);
}

TEST(Moe, GateChecksItsAttributes) {
  EXPECT_ERROR_HAS(resolve("moe_gate", {Shape{4, 16, 32}, Shape{8, 32}}), "op type 'moe_gate' needs attribute 'capacity'");
  EXPECT_ERROR_HAS(resolve("moe_gate", {Shape{4, 16, 32}, Shape{8, 32}},
                           {{"capacity", std::int64_t{4}}, {"top_k", std::int64_t{9}}}),
                   "moe_gate: top_k 9 is outside [1, 8] for 8 experts");
  EXPECT_ERROR_HAS(resolve("moe_gate", {Shape{64, 32}, Shape{8, 32}}, {{"capacity", std::int64_t{4}}}),
                   "moe_gate: input 0 must have rank 3 [g, t, h], got shape [64, 32]");
}

TEST(Moe, DispatchIsTheGShardEinsum) {
  auto r = resolve("moe_dispatch", {Shape{4, 1024, 512}, Shape{4, 1024, 8, 256}}, {}, {DType::bf16, DType::boolean});
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->op.annotation_text, "g t+ h, g t+ e c -> e g c h");
  EXPECT_EQ(r->op.output_shapes[0], (Shape{8, 4, 256, 512}));
  EXPECT_EQ(r->op.output_dtypes[0], DType::bf16);
  EXPECT_DOUBLE_EQ(r->flops, 2.0 * 4 * 1024 * 512 * 8 * 256);
  EXPECT_EQ(builtin_ops().find("moe_dispatch")->backward.no_grad_inputs, std::vector<int>{1});
  EXPECT_ERROR_HAS(resolve("moe_dispatch", {Shape{4, 1024, 512}, Shape{4, 512, 8, 256}}),
                   "('t') has size 512, but 't' is 1024");
}

TEST(Moe, CombineReducesExpertsAndSlots) {
  auto r = resolve("moe_combine", {Shape{8, 4, 256, 512}, Shape{4, 1024, 8, 256}});
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->op.annotation_text, "e+ g c+ h, g t e+ c+ -> g t h");
  EXPECT_EQ(r->op.output_shapes[0], (Shape{4, 1024, 512}));
  EXPECT_DOUBLE_EQ(r->flops, 2.0 * 8 * 4 * 256 * 512 * 1024);
  EXPECT_ERROR_HAS(resolve("moe_combine", {Shape{8, 4, 128, 512}, Shape{4, 1024, 8, 256}}),
                   "('c') has size 256, but 'c' is 128");
}

}  // namespace
}  // namespace loom::ops
