#include "loom/plan/validate.h"

#include <numeric>
#include <random>

#include <gtest/gtest.h>

#include "loom/plan/primitives.h"
#include "plan_test_graph.h"

namespace loom::plan {
namespace {

using testing::assign_all;
using testing::fresh_plan;
using testing::graph;
using testing::mlp_training_graph;
using testing::only_part;

Plan assigned_plan() {
  Plan plan = fresh_plan();
  assign_all(plan, 0);
  return plan;
}

TEST(ValidatePlan, UnassignedAndOutOfRangeDevices) {
  auto plan = make_plan(graph(), ops::builtin_ops());
  ASSERT_TRUE(plan);
  auto unassigned = validate_plan(*plan, 1);
  ASSERT_FALSE(unassigned);
  EXPECT_NE(unassigned.error().message.find("is on no device"), std::string::npos);
  assign_all(*plan, 3);
  auto out_of_range = validate_plan(*plan, 2);
  ASSERT_FALSE(out_of_range);
  EXPECT_NE(out_of_range.error().message.find("is on device 3, but the plan has 2 devices"), std::string::npos);
}

TEST(ValidatePlan, AWrongBoxIsCaughtAsMissingProduction) {
  Plan plan = assigned_plan();
  auto parts = trans(plan, only_part(plan, "fc1"), SplitAlgo{"o"}, 2);
  ASSERT_TRUE(parts);
  // Plant a wrong materialization: the second part writes columns 4..11 instead of 8..15.
  plan.sub_op((*parts)[1]).outputs[0].box[1] = IndexRange{4, 12, 1};
  auto result = validate_plan(plan, 1);
  ASSERT_FALSE(result);
  EXPECT_NE(result.error().message.find("tensor 'fc1' elements [0:4, 12:16] are not fully produced"), std::string::npos)
      << result.error().message;
}

TEST(ValidatePlan, CyclicOrderIsADeadlockNamedByItsOps) {
  Plan plan = assigned_plan();
  const SubOpId fc1 = only_part(plan, "fc1"), act = only_part(plan, "act");
  ASSERT_TRUE(order(plan, act, fc1));  // act reads fc1's output, so this closes a cycle
  auto result = validate_plan(plan, 1);
  ASSERT_FALSE(result);
  EXPECT_NE(result.error().message.find("deadlock: the plan's dependencies form a cycle: fc1 -> act -> fc1"),
            std::string::npos)
      << result.error().message;
}

TEST(ValidatePlan, TwoOpposingOrdersAreADeadlock) {
  Plan plan = assigned_plan();
  auto parts = trans(plan, only_part(plan, "act"), ReplicateAlgo{}, 2);
  ASSERT_TRUE(parts);
  ASSERT_TRUE(order(plan, (*parts)[0], (*parts)[1]));
  ASSERT_TRUE(order(plan, (*parts)[1], (*parts)[0]));
  auto result = validate_plan(plan, 1);
  ASSERT_FALSE(result);
  EXPECT_NE(result.error().message.find("act[0/2] -> act[1/2] -> act[0/2]"), std::string::npos) << result.error().message;
}

TEST(CompleteOrder, IsDeterministicAndRespectsOrders) {
  Plan plan = assigned_plan();
  auto parts = trans(plan, only_part(plan, "act"), ReplicateAlgo{}, 2);
  ASSERT_TRUE(parts);
  ASSERT_TRUE(order(plan, (*parts)[1], (*parts)[0]));
  auto first = complete_order(plan, 1);
  auto second = complete_order(plan, 1);
  ASSERT_TRUE(first);
  EXPECT_EQ(first->global, second->global);
  const auto position = [&](SubOpId id) {
    return std::find(first->global.begin(), first->global.end(), id) - first->global.begin();
  };
  EXPECT_LT(position((*parts)[1]), position((*parts)[0]));
}

// Independent oracle for coverage: element by element, do the value parts of the live producers
// holding that element tile [0, 1)? Intervals are scaled to integers over the lcm of the part counts.
bool element_tiled(const std::vector<ValuePart>& parts) {
  std::int64_t denominator = 1;
  for (const ValuePart& p : parts) denominator = std::lcm(denominator, p.count);
  std::vector<char> reachable(static_cast<std::size_t>(denominator) + 1, 0);
  reachable[0] = 1;
  for (std::int64_t point = 0; point < denominator; ++point) {
    if (!reachable[static_cast<std::size_t>(point)]) continue;
    for (const ValuePart& p : parts)
      if (p.index * (denominator / p.count) == point) reachable[static_cast<std::size_t>((p.index + 1) * (denominator / p.count))] = 1;
  }
  return reachable[static_cast<std::size_t>(denominator)] != 0;
}

bool fully_produced(const Plan& plan, ir::TensorId tensor) {
  const ir::Shape& shape = plan.graph->tensor(tensor).shape;
  std::vector<std::int64_t> index(shape.rank(), 0);
  for (std::int64_t flat = 0; flat < shape.numel(); ++flat) {
    std::int64_t rest = flat;
    for (std::size_t d = shape.rank(); d-- > 0;) {
      index[d] = rest % shape[d];
      rest /= shape[d];
    }
    std::vector<ValuePart> parts;
    for (SubOpId id : plan.live_sub_ops())
      for (const SubTensor& out : plan.sub_op(id).outputs) {
        if (out.tensor != tensor) continue;
        bool holds = true;
        for (std::size_t d = 0; d < index.size(); ++d) holds &= out.box[d].contains(index[d]);
        if (holds) parts.push_back(out.value);
      }
    if (!element_tiled(parts)) return false;
  }
  return true;
}

// Random sequences of trans on random live sub-ops along random identifiers (or replication) keep a
// plan valid; killing a producing part breaks it exactly when the brute-force oracle says its outputs
// are no longer fully produced.
TEST(PlanProperty, RandomTransformationsStayValidAndALostPartIsCaught) {
  const std::uint32_t seed = 4242;
  std::mt19937 rng(seed);
  int caught = 0, tolerated = 0;
  for (int round = 0; round < 80; ++round) {
    Plan plan = assigned_plan();
    for (int step = 0; step < 12; ++step) {
      std::vector<SubOpId> candidates;
      for (SubOpId id : plan.live_sub_ops())
        if (!plan.op_of(id).is_mirror()) candidates.push_back(id);
      const SubOpId target = candidates[std::uniform_int_distribution<std::size_t>(0, candidates.size() - 1)(rng)];
      std::vector<std::string> names = plan.layouts[plan.sub_op(target).op.index()].annotation.identifiers();
      TransAlgo algo = ReplicateAlgo{};
      const std::size_t pick = std::uniform_int_distribution<std::size_t>(0, names.size())(rng);
      if (pick < names.size()) algo = SplitAlgo{names[pick], std::uniform_int_distribution<int>(0, 3)(rng) == 0};
      auto parts = trans(plan, target, algo, 2);
      if (!parts) continue;  // frozen, indivisible, merged: the primitive refused, the plan is unchanged
      ASSERT_TRUE(validate_plan(plan, 1)) << "seed " << seed << " round " << round << " step " << step << "\n"
                                          << plan_to_text(plan);
    }
    std::vector<SubOpId> live = plan.live_sub_ops();
    const SubOpId victim = live[std::uniform_int_distribution<std::size_t>(0, live.size() - 1)(rng)];
    plan.sub_op(victim).live = false;
    bool produced = true;
    for (const SubTensor& out : plan.sub_op(victim).outputs) produced &= fully_produced(plan, out.tensor);
    const bool valid = validate_plan(plan, 1).has_value();
    EXPECT_EQ(valid, produced) << "seed " << seed << " round " << round << ": lost part '" << plan.sub_op(victim).name
                               << "'\n" << plan_to_text(plan);
    (produced ? tolerated : caught) += 1;
  }
  EXPECT_GT(caught, 30) << "most lost parts should break coverage";
  EXPECT_GT(tolerated, 0) << "some lost parts should be covered by replicas";
}

}  // namespace
}  // namespace loom::plan
