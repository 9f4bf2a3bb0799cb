#include "loom/plan/residence.h"

#include <gtest/gtest.h>

#include "plan_test_graph.h"

namespace loom::plan {
namespace {

using testing::fresh_plan;
using testing::graph;
using testing::only_part;

ir::TensorId tensor_named(std::string_view name) {
  for (const ir::FullTensor& t : graph().tensors)
    if (t.name == name) return t.id;
  ADD_FAILURE() << "no tensor " << name;
  return {};
}

TEST(Residence, PersistentTensorsTheirUpdatesAndFinalGradients) {
  const ir::Graph& g = graph();
  const ir::TensorId w1 = tensor_named("fc1.weight");
  EXPECT_TRUE(persists(g, w1));
  EXPECT_TRUE(persists(g, tensor_named("fc1.weight.exp_avg")));
  EXPECT_FALSE(persists(g, tensor_named("x")));
  EXPECT_FALSE(persists(g, tensor_named("fc1.weight.updated")));
  EXPECT_EQ(updated_version(g, w1), tensor_named("fc1.weight.updated"));
  EXPECT_FALSE(updated_version(g, tensor_named("x")).valid());
  const ir::TensorId grad = final_gradient(g, w1);
  ASSERT_TRUE(grad.valid());
  EXPECT_EQ(g.tensor(grad).role, ir::TensorRole::gradient);
  EXPECT_EQ(g.tensor(grad).owner, w1);
}

TEST(Residence, SetOnlyWhereATensorOutlivesItsReaders) {
  Plan plan = fresh_plan();
  const ir::TensorId w1 = tensor_named("fc1.weight");
  EXPECT_EQ(residence_of(plan, w1), Residence::consumers);
  ASSERT_TRUE(set_residence(plan, w1, Residence::optimizer_shards));
  EXPECT_EQ(residence_of(plan, w1), Residence::optimizer_shards);
  EXPECT_TRUE(set_residence(plan, final_gradient(*plan.graph, w1), Residence::optimizer_shards));
  EXPECT_TRUE(set_residence(plan, tensor_named("fc1.weight.exp_avg"), Residence::optimizer_shards));
  for (std::string_view name : {"x", "fc1", "fc1.weight.updated"}) {
    const auto refused = set_residence(plan, tensor_named(name), Residence::optimizer_shards);
    ASSERT_FALSE(refused) << name;
    EXPECT_NE(refused.error().message.find(fmt::format("'{}'", name)), std::string::npos) << refused.error().message;
  }
  EXPECT_EQ(residence_of(plan, tensor_named("x")), Residence::consumers);
}

// fc1 runs whole on device 0; fc1.weight's AdamW step is split in two along the weight's rows, part k
// on device k.
Plan split_step_plan() {
  Plan plan = fresh_plan();
  testing::assign_all(plan, 0);
  const SubOpId step = only_part(plan, "fc1.weight.adamw");
  auto steps = trans(plan, step, SplitAlgo{dim_identifier(plan, step, true, 0, 0).value_or("?")}, 2);
  EXPECT_TRUE(steps) << steps.error().to_string();
  if (steps) {
    EXPECT_TRUE(assign(plan, (*steps)[1], 1));
  }
  return plan;
}

std::string to_text(const std::vector<ResidentPiece>& pieces) {
  std::string text;
  for (const ResidentPiece& p : pieces) text += fmt::format("@{} {}; ", p.device, p.piece.to_string());
  return text;
}

TEST(Residence, ConsumersHoldWhatTheyReadOnce) {
  const Plan plan = split_step_plan();
  const ir::TensorId w1 = tensor_named("fc1.weight");
  // Device 0 reads the whole weight (fc1, its backward) and its first half (the step): the whole only.
  EXPECT_EQ(to_text(resident_pieces(plan, w1)), fmt::format("@0 %{0}[0:16, 0:8]; @1 %{0}[8:16, 0:8]; ", w1.value));
  // A gradient held by its consumers is not held at all.
  EXPECT_TRUE(resident_pieces(plan, final_gradient(*plan.graph, w1)).empty());
  EXPECT_TRUE(resident_pieces(plan, tensor_named("x")).empty());
}

TEST(Residence, OptimizerShardsHoldWhatTheStepsTouch) {
  Plan plan = split_step_plan();
  const ir::TensorId w1 = tensor_named("fc1.weight");
  const ir::TensorId grad = final_gradient(*plan.graph, w1);
  ASSERT_TRUE(set_residence(plan, w1, Residence::optimizer_shards));
  ASSERT_TRUE(set_residence(plan, grad, Residence::optimizer_shards));
  EXPECT_EQ(to_text(resident_pieces(plan, w1)), fmt::format("@0 %{0}[0:8, 0:8]; @1 %{0}[8:16, 0:8]; ", w1.value));
  EXPECT_EQ(to_text(resident_pieces(plan, grad)), fmt::format("@0 %{0}[0:8, 0:8]; @1 %{0}[8:16, 0:8]; ", grad.value));
  const auto all = all_resident_pieces(plan);
  ASSERT_EQ(all.size(), plan.graph->tensors.size());
  EXPECT_EQ(all[w1.index()], resident_pieces(plan, w1));
  // The other parameters keep the default: where device 0's sub-ops read them.
  EXPECT_EQ(to_text(all[tensor_named("fc2.bias").index()]), fmt::format("@0 %{}[0:6]; ", tensor_named("fc2.bias").value));
}

}  // namespace
}  // namespace loom::plan
