#include "loom/verify/graph_interpreter.h"

#include <gtest/gtest.h>

#include <cmath>

#include "loom/ir/autograd.h"
#include "loom/ir/graph_builder.h"
#include "loom/ops/registry.h"

namespace loom::verify {
namespace {

using ir::DType;
using ir::Graph;
using ir::TensorId;

ir::TensorId find_tensor(const Graph& graph, const std::string& name) {
  for (const ir::FullTensor& t : graph.tensors)
    if (t.name == name) return t.id;
  ADD_FAILURE() << "no tensor named " << name;
  return {};
}

ir::TensorId updated_version(const Graph& graph, TensorId param) {
  for (const ir::FullTensor& t : graph.tensors)
    if (t.updates == param && t.role == ir::TensorRole::parameter) return t.id;
  ADD_FAILURE() << "no update of " << graph.tensor(param).name;
  return {};
}

Graph training(Graph forward, double lr) {
  const ir::OptimizerOptions options{.kind = ir::OptimizerKind::sgd, .master_weights = false, .lr = lr};
  auto graph = ir::build_training_graph(forward, ops::builtin_ops(), options);
  EXPECT_TRUE(graph) << graph.error().to_string();
  return *graph;
}

// logits = x W^T, loss = cross_entropy(logits, label): small enough to compute by hand.
Graph tiny_classifier() {
  ir::GraphBuilder b("tiny", ops::builtin_ops());
  const TensorId x = b.input("x", {1, 2}, DType::f32);
  const TensorId label = b.input("label", {1}, DType::i64);
  const TensorId w = b.parameter("w", {2, 2}, DType::f32);
  const TensorId logits = b.op("linear", "head", {x, w});
  b.set_loss(b.op("cross_entropy", "loss", {logits, label}));
  auto graph = std::move(b).finish();
  EXPECT_TRUE(graph) << graph.error().to_string();
  return *graph;
}

TEST(GraphInterpreter, TinyClassifierMatchesHandComputedLossAndSgdStep) {
  const Graph graph = training(tiny_classifier(), 0.1);
  std::vector<NdArray> values = initial_values(graph, 1);
  values[find_tensor(graph, "x").index()] = NdArray(ir::Shape{1, 2}, {1, 2});
  values[find_tensor(graph, "label").index()] = NdArray(ir::Shape{1}, {1});
  const TensorId w = find_tensor(graph, "w");
  values[w.index()] = NdArray(ir::Shape{2, 2}, {1, 0, 0, 1});
  auto result = run_graph(graph, values);
  ASSERT_TRUE(result) << result.error().to_string();
  // logits [1, 2], label 1: loss = log(e + e^2) - 2 = log(1 + 1/e).
  EXPECT_NEAR((*result)[graph.loss.index()].data[0], std::log1p(std::exp(-1.0)), 1e-15);
  // dW = (softmax(logits) - onehot) x^T, then w' = w - 0.1 dW.
  const double p0 = 1 / (1 + std::exp(1.0));
  const std::vector<double> grad = {p0, 2 * p0, -p0, -2 * p0};
  const NdArray& dw = (*result)[find_tensor(graph, "w.grad").index()];
  const NdArray& updated = (*result)[updated_version(graph, w).index()];
  for (std::size_t i = 0; i < 4; ++i) {
    EXPECT_NEAR(dw.data[i], grad[i], 1e-15);
    EXPECT_NEAR(updated.data[i], values[w.index()].data[i] - 0.1 * grad[i], 1e-15);
  }
}

// A one-block GPT-like model: embedding, pre-norm MLP with a residual (its input is read twice, so
// the backward pass accumulates), dropout, a head and the token loss.
Graph tiny_gpt() {
  constexpr std::int64_t batch = 2, seq = 3, vocab = 7, hidden = 4, ffn = 6;
  ir::GraphBuilder b("tiny_gpt", ops::builtin_ops());
  const TensorId ids = b.input("ids", {batch, seq}, DType::i64);
  const TensorId labels = b.input("labels", {batch, seq}, DType::i64);
  const TensorId wte = b.parameter("wte", {vocab, hidden}, DType::f32);
  const TensorId ln_w = b.parameter("ln.weight", {hidden}, DType::f32);
  const TensorId ln_b = b.parameter("ln.bias", {hidden}, DType::f32);
  const TensorId fc1_w = b.parameter("fc1.weight", {ffn, hidden}, DType::f32);
  const TensorId fc1_b = b.parameter("fc1.bias", {ffn}, DType::f32);
  const TensorId fc2_w = b.parameter("fc2.weight", {hidden, ffn}, DType::f32);
  const TensorId head = b.parameter("head.weight", {vocab, hidden}, DType::f32);
  const TensorId h = b.op("embedding", "embed", {ids, wte});
  const TensorId normed = b.op("layer_norm", "ln", {h, ln_w, ln_b});
  const TensorId up = b.op("gelu", "act", {b.op("linear", "fc1", {normed, fc1_w, fc1_b})}, {{"approximate", std::string("tanh")}});
  const TensorId down = b.op("linear", "fc2", {b.op("dropout", "drop", {up}, {{"p", 0.25}}), fc2_w});
  const TensorId residual = b.op("add", "residual", {h, down});
  const TensorId logits = b.op("linear", "head", {residual, head});
  b.set_loss(b.op("cross_entropy", "loss", {logits, labels}));
  auto graph = std::move(b).finish();
  EXPECT_TRUE(graph) << graph.error().to_string();
  return *graph;
}

double loss_of(const Graph& graph, const std::vector<NdArray>& values) {
  auto result = run_graph(graph, values);
  EXPECT_TRUE(result) << result.error().to_string();
  return result ? (*result)[graph.loss.index()].data[0] : NAN;
}

TEST(GraphInterpreter, TinyGptGradientsMatchFiniteDifferences) {
  const double lr = 0.05;
  const Graph graph = training(tiny_gpt(), lr);
  const std::vector<NdArray> values = initial_values(graph, 42, 0.8);
  auto result = run_graph(graph, values);
  ASSERT_TRUE(result) << result.error().to_string();
  const double loss = (*result)[graph.loss.index()].data[0];
  EXPECT_TRUE(std::isfinite(loss));
  EXPECT_GT(loss, 0);
  for (TensorId param : graph.parameters) {
    const std::string& name = graph.tensor(param).name;
    SCOPED_TRACE(name);
    const NdArray& grad = (*result)[find_tensor(graph, name + ".grad").index()];
    ASSERT_EQ(grad.shape, graph.tensor(param).shape);
    // SGD: p' = p - lr * grad, for every element.
    const NdArray& updated = (*result)[updated_version(graph, param).index()];
    for (std::size_t i = 0; i < grad.data.size(); ++i)
      EXPECT_NEAR(updated.data[i], values[param.index()].data[i] - lr * grad.data[i], 1e-15);
    // Central differences of the loss for a few elements.
    for (std::size_t i = 0; i < grad.data.size(); i += 5) {
      const double step = 1e-5;
      std::vector<NdArray> plus = values, minus = values;
      plus[param.index()].data[i] += step;
      minus[param.index()].data[i] -= step;
      const double numeric = (loss_of(graph, plus) - loss_of(graph, minus)) / (2 * step);
      EXPECT_NEAR(grad.data[i], numeric, 1e-6 * std::max(std::abs(numeric), 1e-2)) << "element " << i;
    }
  }
}

TEST(GraphInterpreter, InitialValuesAreDeterministicAndInRange) {
  const Graph graph = training(tiny_gpt(), 0.1);
  const std::vector<NdArray> a = initial_values(graph, 3), b = initial_values(graph, 3), c = initial_values(graph, 4);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  for (double id : a[find_tensor(graph, "ids").index()].data) {
    EXPECT_EQ(id, std::floor(id));
    EXPECT_GE(id, 0);
    EXPECT_LT(id, 7);
  }
  for (double w : a[find_tensor(graph, "wte").index()].data) EXPECT_LE(std::abs(w), 0.5);
}

TEST(GraphInterpreter, AdamWithMasterWeightsStartsFromTheParameter) {
  ir::GraphBuilder b("half", ops::builtin_ops());
  const TensorId x = b.input("x", {2, 3}, DType::bf16);
  const TensorId target = b.input("target", {2, 2}, DType::bf16);
  const TensorId w = b.parameter("w", {2, 3}, DType::bf16);
  b.set_loss(b.op("mse_loss", "loss", {b.op("linear", "proj", {x, w}), target}));
  auto forward = std::move(b).finish();
  ASSERT_TRUE(forward) << forward.error().to_string();
  auto graph = ir::build_training_graph(*forward, ops::builtin_ops(), {.kind = ir::OptimizerKind::adamw, .lr = 0.01});
  ASSERT_TRUE(graph) << graph.error().to_string();
  const std::vector<NdArray> values = initial_values(*graph, 5);
  EXPECT_EQ(values[find_tensor(*graph, "w.master").index()], values[w.index()]);
  auto result = run_graph(*graph, values);
  ASSERT_TRUE(result) << result.error().to_string();
  EXPECT_EQ((*result)[updated_version(*graph, w).index()], (*result)[find_tensor(*graph, "w.master.updated").index()]);
}

TEST(GraphInterpreter, MissingLeafIsAnErrorNamingTheOp) {
  const Graph graph = tiny_classifier();
  auto result = run_graph(graph, {});
  ASSERT_FALSE(result);
  EXPECT_NE(result.error().message.find("head"), std::string::npos);
}

}  // namespace
}  // namespace loom::verify
