#include <gtest/gtest.h>

#include "autograd_test_ops.h"
#include "loom/ir/autograd.h"
#include "loom/ir/graph_builder.h"
#include "loom/ir/validate.h"

namespace loom::ir {
namespace {

using testing::autograd_test_ops;
using testing::find_op;
using testing::find_tensor;
using testing::names;


// x -> linear(w) -> loss; w of the given dtype, plus an unused parameter.
Graph forward(DType dtype) {
  GraphBuilder b("g", autograd_test_ops());
  TensorId x = b.input("x", Shape{4, 8}, dtype);
  TensorId w = b.parameter("w", Shape{16, 8}, dtype);
  b.parameter("unused", Shape{3}, dtype);
  b.set_loss(b.op("test_loss", "loss", {b.op("linear", "fc", {x, w})}));
  auto g = std::move(b).finish();
  EXPECT_TRUE(g) << g.error().to_string();
  return *g;
}

Graph training(DType dtype, const OptimizerOptions& options) {
  auto g = build_training_graph(forward(dtype), autograd_test_ops(), options);
  EXPECT_TRUE(g) << g.error().to_string();
  if (g) {
    EXPECT_TRUE(check_structure(*g)) << check_structure(*g).error().to_string();
  }
  return g ? *g : Graph{};
}

// Training-state bytes per element of parameter `param`: the weight, its gradient, its states.
double bytes_per_parameter(const Graph& g, std::string_view param) {
  const FullTensor& p = *find_tensor(g, param);
  double bytes = static_cast<double>(p.bytes() + find_tensor(g, std::string(param) + ".grad")->bytes());
  for (const FullTensor& t : g.tensors)
    if (t.role == TensorRole::optimizer_state && t.owner == p.id && !t.updates.valid())
      bytes += static_cast<double>(t.bytes());
  return bytes / static_cast<double>(p.shape.numel());
}

TEST(AddOptimizer, MixedPrecisionAdamWHolds16BytesPerParameter) {
  const Graph g = training(DType::bf16, {.kind = OptimizerKind::adamw, .master_weights = true});
  EXPECT_DOUBLE_EQ(bytes_per_parameter(g, "w"), 16.0);

  const Op& step = *find_op(g, "w.adamw");
  EXPECT_EQ(step.type, "adamw");
  EXPECT_EQ(step.pass, Pass::optimizer);
  EXPECT_FALSE(step.is_mirror());
  EXPECT_EQ(names(g, step.inputs), (std::vector<std::string>{"w", "w.grad", "w.master", "w.exp_avg", "w.exp_avg_sq"}));
  EXPECT_EQ(names(g, step.outputs), (std::vector<std::string>{"w.updated", "w.master.updated", "w.exp_avg.updated",
                                                              "w.exp_avg_sq.updated"}));
  EXPECT_EQ(step.annotation, "d0 d1, d0 d1, d0 d1, d0 d1, d0 d1 -> d0 d1, d0 d1, d0 d1, d0 d1");
  EXPECT_EQ(get_bool(step.attrs, "master_weights").value_or(false), true);
  EXPECT_DOUBLE_EQ(get_real(step.attrs, "weight_decay").value_or(-1), 0.1);

  const TensorId w = find_tensor(g, "w")->id;
  for (const char* state : {"w.master", "w.exp_avg", "w.exp_avg_sq"}) {
    const FullTensor& t = *find_tensor(g, state);
    EXPECT_EQ(t.role, TensorRole::optimizer_state) << state;
    EXPECT_EQ(t.owner, w) << state;
    EXPECT_EQ(t.dtype, DType::f32) << state;
    EXPECT_EQ(t.shape, (Shape{16, 8})) << state;
    const FullTensor& updated = *find_tensor(g, std::string(state) + ".updated");
    EXPECT_EQ(updated.role, TensorRole::optimizer_state);
    EXPECT_EQ(updated.updates, t.id);
    EXPECT_EQ(updated.owner, w);
    EXPECT_EQ(updated.dtype, DType::f32);
  }
  const FullTensor& w_updated = *find_tensor(g, "w.updated");
  EXPECT_EQ(w_updated.role, TensorRole::parameter);
  EXPECT_EQ(w_updated.updates, w);
  EXPECT_EQ(w_updated.dtype, DType::bf16);
  EXPECT_EQ(w_updated.shape, (Shape{16, 8}));
}

TEST(AddOptimizer, AdamWithoutMasterWeights) {
  // bf16 without a master copy: 2 + 2 + 4 + 4.
  Graph g = training(DType::bf16, {.kind = OptimizerKind::adam, .master_weights = false});
  EXPECT_DOUBLE_EQ(bytes_per_parameter(g, "w"), 12.0);
  EXPECT_EQ(find_tensor(g, "w.master"), nullptr);
  EXPECT_FALSE(find_op(g, "w.adam")->attrs.contains("weight_decay"));
  // fp32 parameters never get a master copy: 4 + 4 + 4 + 4.
  g = training(DType::f32, {.kind = OptimizerKind::adam, .master_weights = true});
  EXPECT_DOUBLE_EQ(bytes_per_parameter(g, "w"), 16.0);
  EXPECT_EQ(find_tensor(g, "w.master"), nullptr);
  EXPECT_EQ(get_bool(find_op(g, "w.adam")->attrs, "master_weights").value_or(true), false);
}

TEST(AddOptimizer, PlainSgdHasNoState) {
  const Graph g = training(DType::f32, {.kind = OptimizerKind::sgd, .master_weights = false});
  const Op& step = *find_op(g, "w.sgd");
  EXPECT_EQ(names(g, step.inputs), (std::vector<std::string>{"w", "w.grad"}));
  EXPECT_EQ(names(g, step.outputs), (std::vector<std::string>{"w.updated"}));
  EXPECT_EQ(step.annotation, "d0 d1, d0 d1 -> d0 d1");
  for (const FullTensor& t : g.tensors) EXPECT_NE(t.role, TensorRole::optimizer_state) << t.name;
  EXPECT_DOUBLE_EQ(bytes_per_parameter(g, "w"), 8.0);
}

TEST(AddOptimizer, SgdWithMomentumKeepsOneState) {
  const Graph g = training(DType::f32, {.kind = OptimizerKind::sgd, .master_weights = false, .momentum = 0.9});
  const Op& step = *find_op(g, "w.sgd");
  EXPECT_EQ(names(g, step.inputs), (std::vector<std::string>{"w", "w.grad", "w.momentum"}));
  EXPECT_EQ(names(g, step.outputs), (std::vector<std::string>{"w.updated", "w.momentum.updated"}));
  EXPECT_DOUBLE_EQ(get_real(step.attrs, "momentum").value_or(0), 0.9);
}

TEST(AddOptimizer, OnlyParametersWithGradientsAreUpdated) {
  const Graph g = training(DType::f32, {});
  std::size_t steps = 0;
  for (const Op& op : g.ops) steps += op.pass == Pass::optimizer;
  EXPECT_EQ(steps, 1u);
  EXPECT_EQ(find_tensor(g, "unused.updated"), nullptr);
  EXPECT_EQ(g.ops.back().name, "w.adamw");
}

TEST(AddOptimizer, UsesTheAccumulatedGradientOfATiedWeight) {
  GraphBuilder b("tied", autograd_test_ops());
  TensorId x = b.input("x", Shape{4, 8}, DType::f32);
  TensorId w = b.parameter("w", Shape{8, 8}, DType::f32);
  TensorId h = b.op("linear", "fc1", {x, w});
  b.set_loss(b.op("test_loss", "loss", {b.op("linear", "fc2", {h, w})}));
  auto fwd = std::move(b).finish();
  ASSERT_TRUE(fwd);
  auto g = build_training_graph(*fwd, autograd_test_ops(), {});
  ASSERT_TRUE(g) << g.error().to_string();
  EXPECT_EQ(names(*g, find_op(*g, "w.adamw")->inputs).at(1), "w.grad");
  EXPECT_NE(find_tensor(*g, "w.grad.1"), nullptr);
}

TEST(AddOptimizer, Errors) {
  const Graph fwd = forward(DType::f32);
  auto no_grads = add_optimizer(fwd, autograd_test_ops(), {});
  ASSERT_FALSE(no_grads);
  EXPECT_NE(no_grads.error().hint.find("add_backward"), std::string::npos);

  auto with_backward = add_backward(fwd, autograd_test_ops());
  ASSERT_TRUE(with_backward);
  EXPECT_FALSE(add_optimizer(*with_backward, autograd_test_ops(), {.lr = 0}));
  EXPECT_FALSE(add_optimizer(*with_backward, autograd_test_ops(), {.beta2 = 1.0}));
  EXPECT_FALSE(add_optimizer(*with_backward, autograd_test_ops(), {.kind = OptimizerKind::sgd, .momentum = -1}));
  auto once = add_optimizer(*with_backward, autograd_test_ops(), {});
  ASSERT_TRUE(once);
  EXPECT_FALSE(add_optimizer(*once, autograd_test_ops(), {}));
}

TEST(AddOptimizer, TrainingGraphsValidate) {
  for (OptimizerKind kind : {OptimizerKind::sgd, OptimizerKind::adam, OptimizerKind::adamw})
    for (DType dtype : {DType::f32, DType::bf16}) {
      const Graph g = training(dtype, {.kind = kind, .momentum = 0.9});
      auto valid = validate_graph(g, autograd_test_ops());
      EXPECT_TRUE(valid) << name(kind) << " " << name(dtype) << ": " << valid.error().to_string();
    }
}

TEST(AddOptimizer, IsDeterministic) {
  EXPECT_EQ(training(DType::bf16, {}), training(DType::bf16, {}));
}

TEST(OptimizerKind, NamesRoundTrip) {
  for (OptimizerKind kind : {OptimizerKind::sgd, OptimizerKind::adam, OptimizerKind::adamw})
    EXPECT_EQ(parse_optimizer(name(kind)).value(), kind);
  EXPECT_FALSE(parse_optimizer("lamb"));
}

}  // namespace
}  // namespace loom::ir
