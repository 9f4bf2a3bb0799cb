#include "loom/ir/graph.h"

#include <gtest/gtest.h>

#include "loom/ir/autograd.h"
#include "loom/ir/graph_builder.h"
#include "loom/ops/registry.h"

namespace loom::ir {
namespace {

// x[4, 8] -> linear(w[16, 8]) -> logits -> cross_entropy(labels[4]) -> loss, trained by AdamW: gradients
// of the loss, of logits and of w; AdamW's states, owned by w but no gradients.
Graph training_graph() {
  GraphBuilder b("tiny", ops::builtin_ops());
  const TensorId x = b.input("x", Shape{4, 8}, DType::f32);
  const TensorId labels = b.input("labels", Shape{4}, DType::i64);
  const TensorId w = b.parameter("w", Shape{16, 8}, DType::f32);
  b.set_loss(b.op("cross_entropy", "loss", {b.op("linear", "logits", {x, w}), labels}));
  auto forward = std::move(b).finish();
  EXPECT_TRUE(forward) << forward.error().to_string();
  auto training = build_training_graph(*forward, ops::builtin_ops(), {});
  EXPECT_TRUE(training) << training.error().to_string();
  return training.value_or(Graph{});
}

TensorId named(const Graph& graph, std::string_view name) {
  for (const FullTensor& t : graph.tensors)
    if (t.name == name) return t.id;
  ADD_FAILURE() << "no tensor named " << name;
  return {};
}

TEST(IsParameterGradient, HoldsForTheGradientsOfParametersOnly) {
  const Graph graph = training_graph();
  const TensorId w = named(graph, "w");
  int parameter_gradients = 0, activation_gradients = 0;
  for (const FullTensor& t : graph.tensors) {
    if (is_parameter_gradient(graph, t.id)) {
      ++parameter_gradients;
      EXPECT_EQ(t.owner, w) << t.name;
    }
    if (is_gradient_of(graph, t.id, TensorRole::activation)) {
      ++activation_gradients;
      EXPECT_EQ(graph.tensor(t.owner).role, TensorRole::activation) << t.name;
    }
    // The gradient of a parameter is never the gradient of an activation, nor is any non-gradient either.
    if (t.role != TensorRole::gradient) {
      EXPECT_FALSE(is_parameter_gradient(graph, t.id)) << t.name;
      EXPECT_FALSE(is_gradient_of(graph, t.id, TensorRole::activation)) << t.name;
    }
  }
  EXPECT_GE(parameter_gradients, 1);   // w's (one per gradient part where the backward is split)
  EXPECT_GE(activation_gradients, 2);  // the loss's seed and logits'
  EXPECT_FALSE(is_parameter_gradient(graph, w));
}

TEST(IsParameterGradient, AGradientWithoutAnOwnerIsNoParametersGradient) {
  Graph graph;
  const TensorId w = graph.add_tensor(FullTensor{.name = "w", .shape = Shape{2}, .role = TensorRole::parameter});
  const TensorId orphan = graph.add_tensor(FullTensor{.name = "g", .shape = Shape{2}, .role = TensorRole::gradient});
  const TensorId state =
      graph.add_tensor(FullTensor{.name = "m", .shape = Shape{2}, .role = TensorRole::optimizer_state, .owner = w});
  const TensorId gradient =
      graph.add_tensor(FullTensor{.name = "w.grad", .shape = Shape{2}, .role = TensorRole::gradient, .owner = w});
  EXPECT_FALSE(is_parameter_gradient(graph, orphan));
  EXPECT_FALSE(is_parameter_gradient(graph, state));  // owned by a parameter, but no gradient
  EXPECT_TRUE(is_parameter_gradient(graph, gradient));
  EXPECT_FALSE(is_gradient_of(graph, gradient, TensorRole::activation));
}

}  // namespace
}  // namespace loom::ir
