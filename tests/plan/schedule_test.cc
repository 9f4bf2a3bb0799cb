#include "loom/plan/schedule.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "loom/plan/batch.h"
#include "loom/plan/micro_batches.h"
#include "loom/plan/validate.h"
#include "plan_test_graph.h"

namespace loom::plan {
namespace {

const ir::Graph& mlp() {
  static const ir::Graph g = testing::mlp_training_graph();
  return g;
}

Plan fresh_plan() {
  auto p = make_plan(mlp(), ops::builtin_ops());
  EXPECT_TRUE(p) << p.error().to_string();
  return *p;
}

ir::OpId op_named(std::string_view name) {
  for (const ir::Op& op : mlp().ops)
    if (op.name == name) return op.id;
  ADD_FAILURE() << "no op " << name;
  return {};
}

std::vector<ir::OpId> forward_ops() {
  std::vector<ir::OpId> ids;
  for (const ir::Op& op : mlp().ops)
    if (op.pass == ir::Pass::forward) ids.push_back(op.id);
  return ids;
}

TEST(BatchIdentifiers, FollowTheBatchFromTheInputs) {
  const Plan plan = fresh_plan();
  const auto batch = batch_identifiers(plan);
  ASSERT_EQ(batch.size(), mlp().ops.size());
  EXPECT_EQ(batch[op_named("fc1").index()], "*0");
  EXPECT_EQ(batch[op_named("act").index()], "*0");
  EXPECT_EQ(batch[op_named("fc2").index()], "*0");
  EXPECT_EQ(batch[op_named("loss").index()], "n");
  for (const ir::Op& op : mlp().ops)
    if (op.pass != ir::Pass::forward) {
      EXPECT_FALSE(batch[op.id.index()]) << op.name;
    }
}

TEST(MicroBatches, SplitsEveryOpAlongItsBatch) {
  Plan plan = fresh_plan();
  const auto ops = forward_ops();
  auto mb = split_micro_batches(plan, ops, 2);
  ASSERT_TRUE(mb) << mb.error().to_string();
  for (ir::OpId op : ops) {
    ASSERT_EQ(plan.parts[op.index()].size(), 2u);
    for (int k = 0; k < 2; ++k) {
      const SubOpId part = mb->forward(op, k);
      ASSERT_TRUE(part.valid());
      EXPECT_EQ(part, plan.parts[op.index()][static_cast<std::size_t>(k)]);
      EXPECT_TRUE(plan.sub_op(part).mirror.valid());
    }
  }
  // Micro-batch 1 of fc1 reads rows 2..4 of x.
  EXPECT_EQ(plan.sub_op(mb->forward(op_named("fc1"), 1)).inputs[0].box[0].size(), 2);
  testing::assign_all(plan, 0);
  EXPECT_TRUE(validate_plan(plan, 1));
}

TEST(MicroBatches, BatchNotDivisibleIsAnErrorNamingTheOp) {
  Plan plan = fresh_plan();
  const auto ops = forward_ops();
  auto mb = split_micro_batches(plan, ops, 3);
  ASSERT_FALSE(mb);
  EXPECT_NE(mb.error().message.find("'fc1'"), std::string::npos) << mb.error().message;
  EXPECT_NE(mb.error().message.find("batch size 4"), std::string::npos) << mb.error().message;
}

TEST(MicroBatches, OpWithoutBatchIsAnErrorNamingTheOp) {
  // w2 = w * 2 sees only a parameter: no batch.
  ir::GraphBuilder b("param_only", ops::builtin_ops());
  const ir::TensorId x = b.input("x", ir::Shape{4, 4}, ir::DType::f32);
  const ir::TensorId w = b.parameter("w", ir::Shape{4, 4}, ir::DType::f32);
  const ir::TensorId w2 = b.op("gelu", "scale_w", {w});
  b.set_loss(b.op("mean", "loss", {b.op("linear", "fc", {x, w2})}));
  auto forward = std::move(b).finish();
  ASSERT_TRUE(forward) << forward.error().to_string();
  auto graph = ir::build_training_graph(*forward, ops::builtin_ops(), {});
  ASSERT_TRUE(graph) << graph.error().to_string();
  auto made = make_plan(*graph, ops::builtin_ops());
  ASSERT_TRUE(made);
  Plan plan = *made;
  const auto batch = batch_identifiers(plan);
  std::vector<ir::OpId> forward_ids;
  for (const ir::Op& op : graph->ops)
    if (op.pass == ir::Pass::forward) {
      forward_ids.push_back(op.id);  // NOLINT
      EXPECT_EQ(batch[op.id.index()].has_value(), op.name != "scale_w") << op.name;
    }
  auto mb = split_micro_batches(plan, forward_ids, 2);
  ASSERT_FALSE(mb);
  EXPECT_NE(mb.error().message.find("'scale_w' has no batch identifier"), std::string::npos) << mb.error().message;
}

TEST(Schedule, GPipeTemplate) {
  const auto blocks = schedule_blocks({ScheduleKind::gpipe}, 2, 3).value();
  ASSERT_EQ(blocks.size(), 2u);
  std::vector<std::string> s1;
  for (const Block& b : blocks[1]) s1.push_back(to_string(b));
  EXPECT_EQ(s1, (std::vector<std::string>{"F0", "F1", "F2", "B0", "B1", "B2"}));
}

// nnScaler Table 4: stage i warms up with (stages - i) forwards, then backward/forward pairs.
TEST(Schedule, OneFOneBTemplate) {
  const auto blocks = schedule_blocks({ScheduleKind::one_f_one_b}, 3, 5).value();
  const auto text = [&](int s) {
    std::vector<std::string> out;
    for (const Block& b : blocks[static_cast<std::size_t>(s)]) out.push_back(to_string(b));
    return out;
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(text(0), (V{"F0", "F1", "F2", "B0", "F3", "B1", "F4", "B2", "B3", "B4"}));
  EXPECT_EQ(text(1), (V{"F0", "F1", "B0", "F2", "B1", "F3", "B2", "F4", "B3", "B4"}));
  EXPECT_EQ(text(2), (V{"F0", "B0", "F1", "B1", "F2", "B2", "F3", "B3", "F4", "B4"}));
  // Fewer micro-batches than stages: the warm-up stops at the last micro-batch.
  const auto short_blocks = schedule_blocks({ScheduleKind::one_f_one_b}, 3, 2).value();
  V first;
  for (const Block& b : short_blocks[0]) first.push_back(to_string(b));
  EXPECT_EQ(first, (V{"F0", "F1", "B0", "B1"}));
}

// Two stages over the small MLP: fc1+act on device 0, fc2+loss on device 1, 2 micro-batches.
struct TwoStages {
  Plan plan;
  std::vector<std::vector<std::vector<SubOpId>>> stages;
};

TwoStages two_stages() {
  TwoStages t{fresh_plan(), {}};
  const auto ops = forward_ops();
  auto mb = split_micro_batches(t.plan, ops, 2);
  EXPECT_TRUE(mb) << mb.error().to_string();
  const std::vector<std::vector<ir::OpId>> stage_ops = {{op_named("fc1"), op_named("act")},
                                                        {op_named("fc2"), op_named("loss")}};
  t.stages.resize(2);
  for (int s = 0; s < 2; ++s)
    for (int m = 0; m < 2; ++m) {
      t.stages[static_cast<std::size_t>(s)].push_back(mb->micro_batch(stage_ops[static_cast<std::size_t>(s)], m));
      EXPECT_TRUE(stage(t.plan, t.stages[static_cast<std::size_t>(s)].back(), s));
    }
  // Optimizer steps with their parameters' stage; the loss-gradient seed with the loss.
  for (const ir::Op& op : mlp().ops)
    if (op.pass == ir::Pass::optimizer) {
      const bool first = mlp().tensor(op.inputs[0]).name.starts_with("fc1");
      EXPECT_TRUE(stage(t.plan, t.plan.parts[op.id.index()], first ? 0 : 1));
    } else if (op.pass == ir::Pass::backward && !op.is_mirror()) {
      EXPECT_TRUE(stage(t.plan, t.plan.parts[op.id.index()], 1));
    }
  return t;
}

TEST(Schedule, GPipeOnTheSmallMlpIsValid) {
  TwoStages t = two_stages();
  auto blocks = apply_schedule(t.plan, {ScheduleKind::gpipe}, t.stages);
  ASSERT_TRUE(blocks) << blocks.error().to_string();
  EXPECT_TRUE(validate_plan(t.plan, 2));
}

// The loss-gradient seed reads the loss for its shape only (OpDef::shape_only_inputs), so the last
// stage may run micro-batch 0's backward before micro-batch 1's forward: 1F1B has no cycle.
TEST(Schedule, OneFOneBValidatesBecauseTheSeedReadsOnlyTheLossShape) {
  TwoStages t = two_stages();
  auto blocks = apply_schedule(t.plan, {ScheduleKind::one_f_one_b}, t.stages);
  ASSERT_TRUE(blocks) << blocks.error().to_string();
  auto valid = validate_plan(t.plan, 2);
  EXPECT_TRUE(valid) << valid.error().message;
}

// strict ties every sub-op of a block to the last sub-op of the block before it on its device; hoist only
// the block's first sub-op. Both plans validate.
TEST(Schedule, BlockOrderTiesEverySubOpOrOnlyTheFirst) {
  for (const BlockOrder block_order : {BlockOrder::strict, BlockOrder::hoist}) {
    SCOPED_TRACE(std::string(name(block_order)));
    TwoStages t = two_stages();
    auto blocks = apply_schedule(t.plan, {.kind = ScheduleKind::gpipe, .block_order = block_order}, t.stages);
    ASSERT_TRUE(blocks) << blocks.error().to_string();
    const auto ordered = [&](SubOpId a, SubOpId b) {
      return std::ranges::find(t.plan.orders, std::pair{a, b}) != t.plan.orders.end();
    };
    // GPipe on stage 0: F0 F1 B0 B1. F1 follows F0, B0 follows F1.
    const auto& f0 = t.stages[0][0];
    const auto& f1 = t.stages[0][1];
    ASSERT_GE(f1.size(), 2U);
    for (std::size_t k = 0; k < f1.size(); ++k)
      EXPECT_EQ(ordered(f0.back(), f1[k]), k == 0 || block_order == BlockOrder::strict) << t.plan.sub_op(f1[k]).name;
    const auto b0 = block_sub_ops(t.plan, f0, BlockPart::backward);
    ASSERT_GE(b0.size(), 2U);
    for (std::size_t k = 0; k < b0.size(); ++k)
      EXPECT_EQ(ordered(f1.back(), b0[k]), k == 0 || block_order == BlockOrder::strict) << t.plan.sub_op(b0[k]).name;
    auto valid = validate_plan(t.plan, 2);
    EXPECT_TRUE(valid) << valid.error().message;
  }
}

TEST(Schedule, BlockOrderNames) {
  for (const BlockOrder block_order : {BlockOrder::strict, BlockOrder::hoist})
    EXPECT_EQ(parse_block_order(name(block_order)).value(), block_order);
  const Expected<BlockOrder> bad = parse_block_order("loose");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().to_string().find("unknown block order 'loose'"), std::string::npos) << bad.error().to_string();
  EXPECT_NE(bad.error().to_string().find("strict"), std::string::npos) << bad.error().to_string();
}

TEST(Schedule, StagesSharingADeviceAreRefused) {
  TwoStages t = two_stages();
  for (const auto& m : t.stages[1]) ASSERT_TRUE(stage(t.plan, m, 0));
  auto blocks = apply_schedule(t.plan, {ScheduleKind::gpipe}, t.stages);
  ASSERT_FALSE(blocks);
  EXPECT_NE(blocks.error().message.find("shares device 0"), std::string::npos) << blocks.error().message;
}

// Stage 1 running micro-batch 0's backward before its forward contradicts the data: a deadlock, named.
TEST(Schedule, OrderAgainstTheDataIsADeadlock) {
  TwoStages t = two_stages();
  const auto backward = block_sub_ops(t.plan, t.stages[1][0], BlockPart::backward);
  const auto& forward = t.stages[1][0];
  ASSERT_TRUE(order(t.plan, backward.back(), forward.front()));
  auto valid = validate_plan(t.plan, 2);
  ASSERT_FALSE(valid);
  const std::string& message = valid.error().message;
  EXPECT_NE(message.find("deadlock"), std::string::npos) << message;
  EXPECT_NE(message.find(t.plan.sub_op(forward.front()).name), std::string::npos) << message;
  EXPECT_NE(message.find(t.plan.sub_op(backward.back()).name), std::string::npos) << message;
}

}  // namespace
}  // namespace loom::plan
