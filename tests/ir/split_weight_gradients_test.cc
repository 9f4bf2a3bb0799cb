#include <algorithm>

#include <gtest/gtest.h>

#include "loom/ir/autograd.h"
#include "loom/ir/graph_builder.h"
#include "loom/ir/graph_json.h"
#include "loom/ir/graph_stats.h"
#include "loom/ir/validate.h"
#include "loom/ops/registry.h"

namespace loom::ir {
namespace {

// x[2, 3] -> linear(w1[4, 3], b1[4]) -> h -> linear(w2[5, 4]) -> y; loss = sum(y * v), v a parameter.
// fc1's backward computes only parameter gradients (x needs none); fc2's and the loss's compute both.
Graph training_graph() {
  GraphBuilder b("two-layers", ops::builtin_ops());
  const TensorId x = b.input("x", {2, 3}, DType::f32);
  const TensorId w1 = b.parameter("w1", {4, 3}, DType::f32);
  const TensorId b1 = b.parameter("b1", {4}, DType::f32);
  const TensorId w2 = b.parameter("w2", {5, 4}, DType::f32);
  const TensorId v = b.parameter("v", {2, 5}, DType::f32);
  const TensorId h = b.op("linear", "fc1", {x, w1, b1});
  const TensorId y = b.op("linear", "fc2", {h, w2});
  b.set_loss(b.op("einsum", "loss", {y, v}, {{"equation", std::string("ij,ij->")}}));
  Expected<Graph> forward = std::move(b).finish();
  EXPECT_TRUE(forward) << forward.error().to_string();
  Expected<Graph> graph = build_training_graph(*forward, ops::builtin_ops(), {});
  EXPECT_TRUE(graph) << graph.error().to_string();
  return graph.value_or(Graph{});
}

const Op* find_op(const Graph& graph, std::string_view name) {
  const auto it = std::find_if(graph.ops.begin(), graph.ops.end(), [&](const Op& op) { return op.name == name; });
  return it == graph.ops.end() ? nullptr : &*it;
}

TEST(SplitWeightGradients, SplitsOpsWithBothKindsOfGradientIntoInputThenWeightPart) {
  const Graph whole = training_graph();
  Expected<Graph> split = split_weight_gradients(whole);
  ASSERT_TRUE(split) << split.error().to_string();
  ASSERT_TRUE(validate_graph(*split, ops::builtin_ops()));
  EXPECT_EQ(split->ops.size(), whole.ops.size() + 2);  // fc2 and loss split, fc1 whole
  EXPECT_NE(find_op(*split, "fc1.backward"), nullptr);
  for (const char* forward : {"fc2", "loss"}) {
    const std::string name = forward;
    const Op* b = find_op(*split, name + ".backward.input");
    const Op* w = find_op(*split, name + ".backward.weight");
    ASSERT_NE(b, nullptr) << name;
    ASSERT_NE(w, nullptr) << name;
    EXPECT_EQ(w->id.value, b->id.value + 1) << "W follows B in program order";
    EXPECT_EQ(grad_part(*b), GradPart::input);
    EXPECT_EQ(grad_part(*w), GradPart::weight);
    EXPECT_EQ(split->op(b->mirror_of).name, name);
    EXPECT_EQ(b->mirror_of, w->mirror_of);
    EXPECT_EQ(b->inputs, w->inputs) << "both read the whole op's saved tensors and output gradients";
    const Op& original = *find_op(whole, name + ".backward");
    ASSERT_EQ(b->outputs.size() + w->outputs.size(), original.outputs.size());
    for (TensorId t : b->outputs) EXPECT_NE(split->tensor(split->tensor(t).owner).role, TensorRole::parameter);
    for (TensorId t : w->outputs) EXPECT_EQ(split->tensor(split->tensor(t).owner).role, TensorRole::parameter);
  }
  const Op& w2 = *find_op(*split, "fc2.backward.weight");
  EXPECT_EQ(get_int_list(w2.attrs, "grad_inputs").value(), std::vector<std::int64_t>{1});
  EXPECT_EQ(get_int_list(find_op(*split, "fc2.backward.input")->attrs, "grad_inputs").value(),
            std::vector<std::int64_t>{0});
  EXPECT_EQ(split->tensors, whole.tensors) << "gradient tensors are kept, so readers are unchanged";
}

TEST(SplitWeightGradients, IsIdempotentAndRoundTripsThroughJson) {
  Expected<Graph> once = split_weight_gradients(training_graph());
  ASSERT_TRUE(once);
  Expected<Graph> twice = split_weight_gradients(*once);
  ASSERT_TRUE(twice);
  EXPECT_EQ(*twice, *once);
  Expected<Graph> read = graph_from_json(graph_to_json(*once));
  ASSERT_TRUE(read) << read.error().to_string();
  EXPECT_EQ(*read, *once);
}

TEST(SplitWeightGradients, KeepsTheBackwardFlops) {
  const Graph whole = training_graph();
  Expected<Graph> split = split_weight_gradients(whole);
  ASSERT_TRUE(split);
  Expected<GraphStats> a = compute_stats(whole, ops::builtin_ops());
  Expected<GraphStats> b = compute_stats(*split, ops::builtin_ops());
  ASSERT_TRUE(a && b);
  const auto backward = static_cast<std::size_t>(Pass::backward);
  EXPECT_DOUBLE_EQ(a->flops[backward], b->flops[backward]);
  EXPECT_EQ(b->ops[backward], a->ops[backward] + 2);
}

TEST(SplitWeightGradients, ValidatorRefusesMislabelledOrDuplicatedParts) {
  Expected<Graph> split = split_weight_gradients(training_graph());
  ASSERT_TRUE(split);
  // A whole backward beside a part of the same forward op.
  Graph whole_and_part = *split;
  for (Op& op : whole_and_part.ops)
    if (op.name == "fc2.backward.input") op.attrs.erase("grad_part");
  Expected<void> clash = validate_graph(whole_and_part, ops::builtin_ops());
  ASSERT_FALSE(clash);
  EXPECT_NE(clash.error().message.find("op 'fc2' is mirrored by both 'fc2.backward.input' and 'fc2.backward.weight'"),
            std::string::npos)
      << clash.error().message;

  Graph unknown = *split;
  for (Op& op : unknown.ops)
    if (op.name == "fc2.backward.weight") op.attrs["grad_part"] = std::string("both");
  Expected<void> refused = validate_graph(unknown, ops::builtin_ops());
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("'grad_part' is 'both'"), std::string::npos) << refused.error().message;
}

TEST(SplitWeightGradients, ValidatorRefusesAWeightPartComputingAnInputGradient) {
  Expected<Graph> split = split_weight_gradients(training_graph());
  ASSERT_TRUE(split);
  Graph graph = *split;
  // fc2's input part computes h's gradient; calling it the weight part (and dropping the real one's
  // label) leaves a weight part with a non-parameter gradient.
  for (Op& op : graph.ops) {
    if (op.name == "fc2.backward.input") op.attrs["grad_part"] = std::string("weight");
    if (op.name == "fc2.backward.weight") op.attrs["grad_part"] = std::string("input");
  }
  Expected<void> bad = validate_graph(graph, ops::builtin_ops());
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("is the weight part, but output 0 is the gradient of non-parameter 'fc1'"),
            std::string::npos)
      << bad.error().message;
}

}  // namespace
}  // namespace loom::ir
