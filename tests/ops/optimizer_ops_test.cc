// The ops the autograd and optimizer passes insert: accumulate, fill_like, sgd, adam, adamw.
#include <gtest/gtest.h>

#include "loom/ops/families.h"
#include "loom/ops/registry.h"

namespace loom::ops {
namespace {

using ir::DType;
using ir::Shape;

const OpRegistry& pass_ops() {
  static const OpRegistry registry = [] {
    OpRegistry r;
    register_autograd_ops(r);
    register_optimizer_ops(r);
    return r;
  }();
  return registry;
}

struct Resolved {
  Expected<ir::ResolvedOp> op;
  double flops = 0;
};

Resolved resolve(std::string_view type, const ir::Attrs& attrs, const std::vector<Shape>& shapes,
                 const std::vector<DType>& dtypes) {
  const ir::OpDef* def = pass_ops().find(type);
  EXPECT_NE(def, nullptr) << type;
  Resolved r{ir::resolve_op(*def, attrs, shapes, dtypes)};
  if (r.op) r.flops = ir::forward_flops(*def, attrs, shapes, dtypes, *r.op);
  return r;
}

TEST(AutogradOps, AccumulateSumsSameShapeTensors) {
  auto r = resolve("accumulate", {}, {Shape{4, 8}, Shape{4, 8}, Shape{4, 8}}, {DType::bf16, DType::bf16, DType::bf16});
  ASSERT_TRUE(r.op) << r.op.error().to_string();
  EXPECT_EQ(r.op->annotation_text, "d0 d1, d0 d1, d0 d1 -> d0 d1");
  EXPECT_EQ(r.op->output_shapes, (std::vector<Shape>{Shape{4, 8}}));
  EXPECT_EQ(r.op->output_dtypes, (std::vector<DType>{DType::bf16}));
  EXPECT_DOUBLE_EQ(r.flops, 2.0 * 32);

  auto scalars = resolve("accumulate", {}, {Shape{}, Shape{}}, {DType::f32, DType::f32});
  ASSERT_TRUE(scalars.op) << scalars.op.error().to_string();
  EXPECT_EQ(scalars.op->output_shapes, (std::vector<Shape>{Shape{}}));
}

TEST(AutogradOps, AccumulateRejectsMismatches) {
  EXPECT_FALSE(resolve("accumulate", {}, {Shape{4, 8}, Shape{4, 9}}, {DType::f32, DType::f32}).op);
  EXPECT_FALSE(resolve("accumulate", {}, {Shape{4, 8}, Shape{4, 8}}, {DType::f32, DType::bf16}).op);
  EXPECT_FALSE(resolve("accumulate", {}, {Shape{4, 8}, Shape{4, 8}}, {DType::i64, DType::i64}).op);
  EXPECT_FALSE(resolve("accumulate", {}, {}, {}).op);
}

TEST(AutogradOps, FillLikeCopiesShapeAndDtype) {
  auto scalar = resolve("fill_like", {}, {Shape{}}, {DType::f32});
  ASSERT_TRUE(scalar.op) << scalar.op.error().to_string();
  EXPECT_EQ(scalar.op->annotation_text, " -> ");
  EXPECT_EQ(scalar.op->output_shapes, (std::vector<Shape>{Shape{}}));
  auto matrix = resolve("fill_like", {{"value", 0.5}}, {Shape{3, 5}}, {DType::bf16});
  ASSERT_TRUE(matrix.op);
  EXPECT_EQ(matrix.op->annotation_text, "d0 d1 -> d0 d1");
  EXPECT_EQ(matrix.op->output_dtypes, (std::vector<DType>{DType::bf16}));
  EXPECT_FALSE(pass_ops().find("fill_like")->backward.differentiable);
  EXPECT_FALSE(resolve("fill_like", {{"value", std::string("one")}}, {Shape{}}, {DType::f32}).op);
}

TEST(OptimizerOps, AdamWithMasterWeightsTakesThreeStates) {
  const std::vector<Shape> shapes(5, Shape{16, 8});
  auto r = resolve("adamw", {{"lr", 1e-4}, {"master_weights", true}, {"weight_decay", 0.1}}, shapes,
                   {DType::bf16, DType::bf16, DType::f32, DType::f32, DType::f32});
  ASSERT_TRUE(r.op) << r.op.error().to_string();
  EXPECT_EQ(r.op->annotation_text, "d0 d1, d0 d1, d0 d1, d0 d1, d0 d1 -> d0 d1, d0 d1, d0 d1, d0 d1");
  EXPECT_EQ(r.op->output_dtypes, (std::vector<DType>{DType::bf16, DType::f32, DType::f32, DType::f32}));
  EXPECT_EQ(r.op->output_shapes, std::vector<Shape>(4, Shape{16, 8}));
  EXPECT_DOUBLE_EQ(r.flops, 14.0 * 128);

  auto adam = resolve("adam", {}, std::vector<Shape>(4, Shape{10}), {DType::f32, DType::f32, DType::f32, DType::f32});
  ASSERT_TRUE(adam.op) << adam.op.error().to_string();
  EXPECT_DOUBLE_EQ(adam.flops, 12.0 * 10);
}

TEST(OptimizerOps, SgdStatesFollowMomentum) {
  auto plain = resolve("sgd", {{"lr", 0.1}}, {Shape{10}, Shape{10}}, {DType::f32, DType::f32});
  ASSERT_TRUE(plain.op) << plain.op.error().to_string();
  EXPECT_EQ(plain.op->annotation_text, "d0, d0 -> d0");
  EXPECT_DOUBLE_EQ(plain.flops, 2.0 * 10);
  auto momentum = resolve("sgd", {{"momentum", 0.9}}, std::vector<Shape>(3, Shape{10}),
                          {DType::f32, DType::f32, DType::f32});
  ASSERT_TRUE(momentum.op) << momentum.op.error().to_string();
  EXPECT_EQ(momentum.op->output_shapes.size(), 2u);
  EXPECT_DOUBLE_EQ(momentum.flops, 4.0 * 10);
  // A momentum state without momentum is one input too many.
  auto extra = resolve("sgd", {}, std::vector<Shape>(3, Shape{10}), {DType::f32, DType::f32, DType::f32});
  ASSERT_FALSE(extra.op);
  EXPECT_NE(extra.op.error().message.find("(2 inputs), got 3"), std::string::npos) << extra.op.error().message;
}

TEST(OptimizerOps, RejectBadStates) {
  // States must be f32 and shaped like the parameter.
  EXPECT_FALSE(
      resolve("adam", {}, std::vector<Shape>(4, Shape{10}), {DType::f32, DType::f32, DType::bf16, DType::f32}).op);
  EXPECT_FALSE(resolve("adam", {}, {Shape{10}, Shape{10}, Shape{10}, Shape{11}},
                       {DType::f32, DType::f32, DType::f32, DType::f32})
                   .op);
  EXPECT_FALSE(resolve("adam", {}, {Shape{10}, Shape{10}}, {DType::f32, DType::f32}).op);
  EXPECT_FALSE(resolve("adam", {{"momentum", 0.9}}, std::vector<Shape>(4, Shape{10}),
                       {DType::f32, DType::f32, DType::f32, DType::f32})
                   .op);  // sgd's attribute
}

TEST(OptimizerOps, AreOptimizerClassAndNotDifferentiable) {
  for (const char* type : {"sgd", "adam", "adamw"}) {
    const ir::OpDef* def = pass_ops().find(type);
    ASSERT_NE(def, nullptr) << type;
    EXPECT_EQ(def->op_class, ir::OpClass::optimizer);
    EXPECT_EQ(def->family, "optimizer");
    EXPECT_FALSE(def->backward.differentiable);
  }
}

TEST(OptimizerOps, AreBuiltIn) {
  for (const char* type : {"sgd", "adam", "adamw", "accumulate", "fill_like"})
    EXPECT_NE(builtin_ops().find(type), nullptr) << type;
}

}  // namespace
}  // namespace loom::ops
