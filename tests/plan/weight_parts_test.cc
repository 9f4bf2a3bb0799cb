// Plans of a graph whose backward ops are split (ir::split_weight_gradients): each forward sub-op keeps its
// input part B as `mirror` and gains its weight part W as `weight_mirror`, through make_plan, trans,
// assign, plan JSON and the schedule's blocks.
#include <gtest/gtest.h>

#include "loom/plan/plan_json.h"
#include "loom/plan/schedule.h"
#include "loom/plan/validate.h"
#include "plan_test_graph.h"

namespace loom::plan {
namespace {

using testing::only_part;

const ir::Graph& split_graph() {
  static const ir::Graph g = [] {
    Expected<ir::Graph> split = ir::split_weight_gradients(testing::mlp_training_graph());
    EXPECT_TRUE(split) << split.error().to_string();
    return split.value_or(ir::Graph{});
  }();
  return g;
}

Plan split_plan() {
  Expected<Plan> plan = make_plan(split_graph(), ops::builtin_ops());
  EXPECT_TRUE(plan) << plan.error().to_string();
  return plan.value_or(Plan{});
}

TEST(WeightParts, MakePlanLinksTheInputAndTheWeightPart) {
  const Plan plan = split_plan();
  const SubOp& fc2 = plan.sub_op(only_part(plan, "fc2"));
  ASSERT_TRUE(fc2.mirror.valid() && fc2.weight_mirror.valid());
  EXPECT_EQ(plan.sub_op(fc2.mirror).name, "fc2.backward.input");
  EXPECT_EQ(plan.sub_op(fc2.weight_mirror).name, "fc2.backward.weight");
  EXPECT_EQ(plan.sub_op(fc2.weight_mirror).mirror, fc2.id);
  // fc1's backward computes parameter gradients only (x needs none): it stays whole.
  const SubOp& fc1 = plan.sub_op(only_part(plan, "fc1"));
  EXPECT_EQ(plan.sub_op(fc1.mirror).name, "fc1.backward");
  EXPECT_FALSE(fc1.weight_mirror.valid());
}

TEST(WeightParts, TransAndAssignCarryBothParts) {
  Plan plan = split_plan();
  Expected<std::vector<SubOpId>> halves = trans(plan, only_part(plan, "fc2"), SplitAlgo{"*0"}, 2);
  ASSERT_TRUE(halves) << halves.error().to_string();
  for (std::size_t k = 0; k < 2; ++k) {
    const SubOp& half = plan.sub_op((*halves)[k]);
    ASSERT_TRUE(half.mirror.valid() && half.weight_mirror.valid());
    const SubOp& w = plan.sub_op(half.weight_mirror);
    EXPECT_EQ(w.name, fmt::format("fc2.backward.weight[{}/2]", k));
    EXPECT_EQ(w.mirror, half.id);
    // The weight gradients of a batch half are value parts of the whole; the input gradient a row range.
    EXPECT_EQ(w.outputs[0].value, (ValuePart{static_cast<int>(k), 2}));
    EXPECT_EQ(plan.sub_op(half.mirror).outputs[0].box[0].size(), 2);
    ASSERT_TRUE(assign(plan, half.id, static_cast<int>(k)));
    EXPECT_EQ(w.device, static_cast<int>(k));
    EXPECT_EQ(plan.sub_op(half.mirror).device, static_cast<int>(k));
  }
  EXPECT_EQ(plan.parts[plan.sub_op(plan.sub_op((*halves)[0]).weight_mirror).op.index()].size(), 2u);
}

TEST(WeightParts, PlanJsonRoundTripsTheWeightPart) {
  Plan plan = split_plan();
  ASSERT_TRUE(trans(plan, only_part(plan, "fc2"), SplitAlgo{"*0"}, 2));
  for (SubOpId id : plan.live_sub_ops())
    if (plan.op_of(id).pass != ir::Pass::backward) {
      ASSERT_TRUE(assign(plan, id, 0));
    }
  const std::string text = plan_to_json(plan);
  EXPECT_NE(text.find("\"weight_backward\""), std::string::npos);
  Expected<Plan> read = plan_from_json(text, split_graph(), ops::builtin_ops(), "plan.json");
  ASSERT_TRUE(read) << read.error().to_string();
  EXPECT_EQ(plan_to_json(*read), text);
  for (SubOpId id : read->live_sub_ops()) {
    const SubOp& s = read->sub_op(id);
    if (s.weight_mirror.valid()) {
      EXPECT_EQ(read->sub_op(s.weight_mirror).mirror, id);
    }
  }
}

TEST(WeightParts, WeightBlocksListTheWeightPartsInReverse) {
  Plan plan = split_plan();
  std::vector<SubOpId> forward;
  for (const char* name : {"fc1", "act", "fc2", "loss"}) forward.push_back(only_part(plan, name));
  const std::vector<SubOpId> w = block_sub_ops(plan, forward, BlockPart::weight);
  ASSERT_EQ(w.size(), 1u);  // fc2 alone computes both kinds of gradient (the loss reads no parameter)
  EXPECT_EQ(plan.sub_op(w[0]).name, "fc2.backward.weight");
  const std::vector<SubOpId> b = block_sub_ops(plan, forward, BlockPart::backward);
  EXPECT_EQ(b.size(), 4u);  // fc1's whole backward, act's, fc2's input part, the loss's
}

}  // namespace
}  // namespace loom::plan
