#include "loom/plan/primitives.h"

#include <gtest/gtest.h>

#include "loom/plan/validate.h"
#include "plan_test_graph.h"

namespace loom::plan {
namespace {

using testing::assign_all;
using testing::fresh_plan;
using testing::graph;
using testing::mlp_training_graph;
using testing::only_part;


TEST(MakePlan, OneWholeSubOpPerOpWithBackwardLinked) {
  Plan plan = fresh_plan();
  EXPECT_EQ(plan.live_sub_ops().size(), graph().ops.size());
  const SubOpId fc1 = only_part(plan, "fc1");
  const SubOpId fc1_backward = plan.sub_op(fc1).mirror;
  ASSERT_TRUE(fc1_backward.valid());
  EXPECT_EQ(plan.sub_op(fc1_backward).mirror, fc1);
  EXPECT_EQ(plan.sub_op(fc1).inputs[0].to_string(), "%0[0:4, 0:8]");
  EXPECT_EQ(dim_identifier(plan, fc1, false, 0, 0), "*0");  // the batch dim of the linear's input
  assign_all(plan, 0);
  EXPECT_TRUE(validate_plan(plan, 1));
}

TEST(Trans, ColumnParallelLinearSlicesWeightBiasAndOutput) {
  Plan plan = fresh_plan();
  auto parts = trans(plan, only_part(plan, "fc1"), SplitAlgo{"o"}, 2);
  ASSERT_TRUE(parts) << parts.error().to_string();
  const SubOp& second = plan.sub_op((*parts)[1]);
  EXPECT_EQ(second.name, "fc1[1/2]");
  EXPECT_EQ(second.inputs[0].box[1].to_string(), "0:8");    // x whole
  EXPECT_EQ(second.inputs[1].box[0].to_string(), "8:16");   // weight rows 8..15
  EXPECT_EQ(second.inputs[2].box[0].to_string(), "8:16");   // bias
  EXPECT_EQ(second.outputs[0].box[1].to_string(), "8:16");  // output columns
  // Backward: the weight gradient is sliced like the weight; x is an input (no gradient).
  const SubOp& backward = plan.sub_op(second.mirror);
  EXPECT_EQ(backward.name, "fc1.backward[1/2]");
  for (const SubTensor& g : backward.outputs) EXPECT_TRUE(g.value.is_whole()) << g.to_string();
  EXPECT_EQ(backward.outputs[0].box[0].to_string(), "8:16");
  assign_all(plan, 0);
  EXPECT_TRUE(validate_plan(plan, 1));
}

TEST(Trans, RowParallelLinearGivesValuePartsAndValueSplitsTheBias) {
  Plan plan = fresh_plan();
  auto parts = trans(plan, only_part(plan, "fc2"), SplitAlgo{"i"}, 2);
  ASSERT_TRUE(parts) << parts.error().to_string();
  const SubOp& first = plan.sub_op((*parts)[0]);
  EXPECT_EQ(first.inputs[0].box[1].to_string(), "0:8");  // activation columns
  EXPECT_EQ(first.inputs[1].box[1].to_string(), "0:8");  // weight columns
  EXPECT_EQ(first.inputs[2].value, (ValuePart{0, 2}));   // bias added once across the parts
  EXPECT_EQ(first.outputs[0].value, (ValuePart{0, 2}));  // partial sums
  const SubOp& backward = plan.sub_op(first.mirror);
  // grad_inputs are (activation, weight, bias): sliced, sliced, and the whole bias gradient.
  ASSERT_EQ(backward.outputs.size(), 3u);
  EXPECT_EQ(backward.outputs[0].box[1].to_string(), "0:8");
  EXPECT_TRUE(backward.outputs[0].value.is_whole());
  EXPECT_TRUE(backward.outputs[2].value.is_whole());
  assign_all(plan, 0);
  EXPECT_TRUE(validate_plan(plan, 1));
}

TEST(Trans, RefusesDividingAPieceASiblingAlsoProducesInPart) {
  // Each half of a row-parallel fc2 produces the whole bias gradient [0:6]. Splitting one half along the
  // output rows leaves whole pieces [0:3] and [3:6] (allowed); replicating one of those would divide
  // [3:6] into value parts, which the other half's whole [0:6] overlaps: two decompositions of one value
  // with labels no tiling could tell apart (found by the random ExecPlan property test).
  Plan plan = fresh_plan();
  auto halves = trans(plan, only_part(plan, "fc2"), SplitAlgo{"i"}, 2);
  ASSERT_TRUE(halves) << halves.error().to_string();
  auto rows = trans(plan, (*halves)[1], SplitAlgo{"o"}, 2);
  ASSERT_TRUE(rows) << rows.error().to_string();
  auto replicas = trans(plan, (*rows)[1], ReplicateAlgo{}, 3);
  ASSERT_FALSE(replicas);
  EXPECT_NE(replicas.error().message.find("also produces"), std::string::npos) << replicas.error().message;
}

TEST(Trans, ReplicaGradientsAreValueParts) {
  Plan plan = fresh_plan();
  auto parts = trans(plan, only_part(plan, "act"), ReplicateAlgo{}, 3);
  ASSERT_TRUE(parts);
  for (int k = 0; k < 3; ++k) {
    const SubOp& part = plan.sub_op((*parts)[static_cast<std::size_t>(k)]);
    EXPECT_TRUE(part.outputs[0].value.is_whole());
    const SubOp& backward = plan.sub_op(part.mirror);
    EXPECT_EQ(backward.outputs[0].value, (ValuePart{k, 3}));
  }
  assign_all(plan, 0);
  EXPECT_TRUE(validate_plan(plan, 1));
}

TEST(Trans, RedundantReplicasComputeWholeGradients) {
  Plan plan = fresh_plan();
  auto parts = trans(plan, only_part(plan, "act"), ReplicateAlgo{.redundant_backward = true}, 3);
  ASSERT_TRUE(parts);
  for (int k = 0; k < 3; ++k) {
    const SubOp& backward = plan.sub_op(plan.sub_op((*parts)[static_cast<std::size_t>(k)]).mirror);
    for (const SubTensor& in : backward.inputs) EXPECT_TRUE(in.value.is_whole()) << in.to_string();
    for (const SubTensor& out : backward.outputs) EXPECT_TRUE(out.value.is_whole()) << out.to_string();
  }
  assign_all(plan, 0);
  EXPECT_TRUE(validate_plan(plan, 1));
}

// h = fc1(x) is read by the activation and the residual add, so its gradient is an accumulation.
ir::Graph residual_graph() {
  ir::GraphBuilder b("residual", ops::builtin_ops());
  const ir::TensorId x = b.input("x", ir::Shape{4, 8}, ir::DType::f32);
  const ir::TensorId w = b.parameter("fc1.weight", ir::Shape{8, 8}, ir::DType::f32);
  const ir::TensorId h = b.op("linear", "fc1", {x, w});
  const ir::TensorId y = b.op("add", "residual", {b.op("gelu", "act", {h}), h});
  b.set_loss(b.op("sum", "loss", {y}));
  auto training = ir::build_training_graph(std::move(b).finish().value(), ops::builtin_ops(), {});
  EXPECT_TRUE(training) << training.error().to_string();
  return *training;
}

TEST(Trans, ValueSplitOnlyForLinearOpsWithoutBackward) {
  Plan plan = fresh_plan();
  const auto error = trans(plan, only_part(plan, "act"), ValueSplitAlgo{}, 2);
  ASSERT_FALSE(error);
  EXPECT_NE(error.error().to_string().find("not linear"), std::string::npos) << error.error().to_string();
  static const ir::Graph residual = residual_graph();
  plan = make_plan(residual, ops::builtin_ops()).value();
  for (const ir::Op& op : residual.ops) {
    if (op.type != "accumulate") continue;
    auto parts = trans(plan, plan.parts[op.id.index()].front(), ValueSplitAlgo{}, 2);
    ASSERT_TRUE(parts) << parts.error().to_string();
    for (int k = 0; k < 2; ++k) {
      const SubOp& part = plan.sub_op((*parts)[static_cast<std::size_t>(k)]);
      for (const SubTensor& in : part.inputs) EXPECT_EQ(in.value, (ValuePart{k, 2}));
      EXPECT_EQ(part.outputs[0].value, (ValuePart{k, 2}));
    }
    assign_all(plan, 0);
    EXPECT_TRUE(validate_plan(plan, 1)) << validate_plan(plan, 1).error().to_string();
    return;
  }
  FAIL() << "the residual graph has no gradient accumulation";
}

TEST(Trans, DataParallelOverTwoDevicesValidates) {
  Plan plan = fresh_plan();
  for (const ir::Op& op : graph().ops) {
    if (op.pass != ir::Pass::forward) continue;
    const SubOpId whole = plan.parts[op.id.index()].front();
    const auto batch = dim_identifier(plan, whole, false, 0, 0);
    ASSERT_TRUE(batch) << op.name;
    auto parts = trans(plan, whole, SplitAlgo{*batch}, 2);
    ASSERT_TRUE(parts) << op.name << ": " << parts.error().to_string();
    for (int k = 0; k < 2; ++k) ASSERT_TRUE(assign(plan, (*parts)[static_cast<std::size_t>(k)], k));
  }
  // Every other op (loss seed, optimizer steps) runs on both devices.
  for (const ir::Op& op : graph().ops) {
    if (op.pass == ir::Pass::forward || op.is_mirror()) continue;
    auto copies = trans(plan, plan.parts[op.id.index()].front(), ReplicateAlgo{}, 2);
    ASSERT_TRUE(copies) << op.name;
    for (int k = 0; k < 2; ++k) ASSERT_TRUE(assign(plan, (*copies)[static_cast<std::size_t>(k)], k));
  }
  auto valid = validate_plan(plan, 2);
  EXPECT_TRUE(valid) << (valid ? "" : valid.error().to_string());
  // The weight gradient of each data-parallel part is a value part: materialization must all-reduce it.
  for (const ir::Op& op : graph().ops) {
    if (op.name != "fc1.backward") continue;
    for (SubOpId part : plan.parts[op.id.index()]) EXPECT_EQ(plan.sub_op(part).outputs[0].value.count, 2);
  }
  auto order = complete_order(plan, 2);
  ASSERT_TRUE(order);
  EXPECT_EQ(order->global.size(), plan.live_sub_ops().size());
  EXPECT_EQ(order->per_device[0].size() + order->per_device[1].size(), order->global.size());
}

TEST(Trans, Errors) {
  Plan plan = fresh_plan();
  const SubOpId loss = only_part(plan, "loss");
  auto frozen = trans(plan, loss, SplitAlgo{"v"}, 2);
  ASSERT_FALSE(frozen);
  EXPECT_NE(frozen.error().message.find("identifier 'v' of op 'loss' is frozen"), std::string::npos) << frozen.error().message;
  auto unknown = trans(plan, loss, SplitAlgo{"zz"}, 2);
  ASSERT_FALSE(unknown);
  EXPECT_NE(unknown.error().message.find("has no identifier 'zz'"), std::string::npos);
  auto indivisible = trans(plan, only_part(plan, "fc2"), SplitAlgo{"o"}, 4);
  ASSERT_FALSE(indivisible);
  EXPECT_NE(indivisible.error().message.find("'o' has 6 elements in input 1 of op 'fc2'"), std::string::npos)
      << indivisible.error().message;
  const SubOpId fc1 = only_part(plan, "fc1");
  auto backward = trans(plan, plan.sub_op(fc1).mirror, SplitAlgo{"o"}, 2);
  ASSERT_FALSE(backward);
  EXPECT_NE(backward.error().message.find("is a backward op"), std::string::npos);
  ASSERT_TRUE(trans(plan, fc1, SplitAlgo{"o"}, 2));
  auto dead = trans(plan, fc1, SplitAlgo{"o"}, 2);
  ASSERT_FALSE(dead);
  EXPECT_NE(dead.error().message.find("already transformed"), std::string::npos);
}

}  // namespace
}  // namespace loom::plan
