#include "loom/ir/autograd.h"

#include <functional>

#include <gtest/gtest.h>

#include "autograd_test_ops.h"
#include "loom/ir/graph_builder.h"
#include "loom/ir/validate.h"

namespace loom::ir {
namespace {

using testing::autograd_test_ops;
using testing::find_op;
using testing::find_tensor;
using testing::names;


std::size_t count_pass(const Graph& g, Pass pass) {
  std::size_t n = 0;
  for (const Op& op : g.ops) n += op.pass == pass;
  return n;
}

Graph build(const std::function<void(GraphBuilder&)>& body) {
  GraphBuilder b("g", autograd_test_ops());
  body(b);
  auto graph = std::move(b).finish();
  EXPECT_TRUE(graph) << graph.error().to_string();
  return graph ? *graph : Graph{};
}

// x -> fc1 (w1) -> act (relu-like) -> fc2 (w2) -> loss
Graph mlp() {
  return build([](GraphBuilder& b) {
    TensorId x = b.input("x", Shape{4, 8}, DType::f32);
    TensorId w1 = b.parameter("w1", Shape{16, 8}, DType::f32);
    TensorId w2 = b.parameter("w2", Shape{2, 16}, DType::f32);
    TensorId h = b.op("linear", "fc1", {x, w1});
    TensorId r = b.op("test_relu", "act", {h});
    TensorId y = b.op("linear", "fc2", {r, w2});
    b.set_loss(b.op("test_loss", "loss", {y}));
  });
}

TEST(AddBackward, MirrorsEachForwardOpOnce) {
  const Graph fwd = mlp();
  auto g = add_backward(fwd, autograd_test_ops());
  ASSERT_TRUE(g) << g.error().to_string();
  ASSERT_TRUE(check_structure(*g)) << check_structure(*g).error().to_string();
  EXPECT_EQ(count_pass(*g, Pass::forward), 4u);
  EXPECT_EQ(count_pass(*g, Pass::backward), 5u);  // seed + 4 mirrors
  EXPECT_EQ(g->loss, fwd.loss);

  // The forward part is unchanged.
  for (std::size_t i = 0; i < fwd.ops.size(); ++i) EXPECT_EQ(g->ops[i], fwd.ops[i]);

  // Reverse program order, seed first.
  std::vector<std::string> order;
  for (std::size_t i = fwd.ops.size(); i < g->ops.size(); ++i) order.push_back(g->ops[i].name);
  EXPECT_EQ(order, (std::vector<std::string>{"loss.grad.seed", "loss.backward", "fc2.backward", "act.backward",
                                             "fc1.backward"}));

  for (const Op& op : g->ops) {
    if (op.pass != Pass::backward || op.type == "fill_like") continue;
    ASSERT_TRUE(op.is_mirror()) << op.name;
    const Op& forward = g->op(op.mirror_of);
    EXPECT_EQ(op.type, forward.type);
    EXPECT_EQ(op.annotation, forward.annotation);
    EXPECT_EQ(op.name, forward.name + ".backward");
    EXPECT_FALSE(op.attrs.contains("equation"));
  }

  const Op& fc2 = *find_op(*g, "fc2.backward");
  auto layout = mirror_layout(fc2);
  ASSERT_TRUE(layout) << layout.error().to_string();
  EXPECT_EQ(layout->grad_outputs, (std::vector<int>{0}));
  EXPECT_EQ(layout->grad_inputs, (std::vector<int>{0, 1}));
  EXPECT_TRUE(layout->saved_inputs);
  EXPECT_FALSE(layout->saved_outputs);
  EXPECT_EQ(names(*g, fc2.inputs), (std::vector<std::string>{"act", "w2", "fc2.grad"}));
  EXPECT_EQ(names(*g, fc2.outputs), (std::vector<std::string>{"act.grad", "w2.grad"}));

  // relu-like: reads its output, not its input.
  const Op& act = *find_op(*g, "act.backward");
  layout = mirror_layout(act);
  ASSERT_TRUE(layout);
  EXPECT_FALSE(layout->saved_inputs);
  EXPECT_TRUE(layout->saved_outputs);
  EXPECT_EQ(names(*g, act.inputs), (std::vector<std::string>{"act", "act.grad"}));
  EXPECT_EQ(names(*g, act.outputs), (std::vector<std::string>{"fc1.grad"}));

  // The data input gets no gradient: fc1's backward writes only the weight's.
  const Op& fc1 = *find_op(*g, "fc1.backward");
  layout = mirror_layout(fc1);
  ASSERT_TRUE(layout);
  EXPECT_EQ(layout->grad_inputs, (std::vector<int>{1}));
  EXPECT_EQ(names(*g, fc1.outputs), (std::vector<std::string>{"w1.grad"}));
  EXPECT_EQ(find_tensor(*g, "x.grad"), nullptr);
  auto valid = validate_graph(*g, autograd_test_ops());
  EXPECT_TRUE(valid) << valid.error().to_string();
}

TEST(AddBackward, SeedsTheLossGradient) {
  auto g = add_backward(mlp(), autograd_test_ops());
  ASSERT_TRUE(g) << g.error().to_string();
  const Op& seed = *find_op(*g, "loss.grad.seed");
  EXPECT_EQ(seed.type, "fill_like");
  EXPECT_EQ(seed.pass, Pass::backward);
  EXPECT_FALSE(seed.is_mirror());
  EXPECT_EQ(seed.annotation, " -> ");
  EXPECT_EQ(get_real(seed.attrs, "value").value_or(0), 1.0);
  EXPECT_EQ(seed.inputs, (std::vector<TensorId>{g->loss}));
  const FullTensor& grad = g->tensor(seed.outputs.at(0));
  EXPECT_EQ(grad.name, "loss.grad");
  EXPECT_EQ(grad.role, TensorRole::gradient);
  EXPECT_EQ(grad.owner, g->loss);
  EXPECT_EQ(grad.shape.rank(), 0u);
  EXPECT_EQ(names(*g, find_op(*g, "loss.backward")->inputs), (std::vector<std::string>{"fc2", "loss.grad"}));
}

TEST(AddBackward, ParameterGradientsMatchTheirParameters) {
  const Graph fwd = build([](GraphBuilder& b) {
    TensorId x = b.input("x", Shape{4, 8}, DType::bf16);
    TensorId w = b.parameter("layer.weight", Shape{16, 8}, DType::bf16);
    TensorId bias = b.parameter("layer.bias", Shape{16}, DType::bf16);
    b.set_loss(b.op("test_loss", "loss", {b.op("linear", "layer", {x, w, bias})}));
  });
  auto g = add_backward(fwd, autograd_test_ops());
  ASSERT_TRUE(g) << g.error().to_string();
  for (TensorId p : fwd.parameters) {
    const FullTensor& param = fwd.tensor(p);
    const FullTensor* grad = find_tensor(*g, param.name + ".grad");
    ASSERT_NE(grad, nullptr) << param.name;
    EXPECT_EQ(grad->shape, param.shape);
    EXPECT_EQ(grad->dtype, DType::bf16);
    EXPECT_EQ(grad->role, TensorRole::gradient);
    EXPECT_EQ(grad->owner, p);
    EXPECT_FALSE(grad->updates.valid());
  }
}

TEST(AddBackward, AccumulatesPartialGradientsOfATensorReadTwice) {
  // h is read by act and by sum; w is read by two linears (tied weights).
  const Graph fwd = build([](GraphBuilder& b) {
    TensorId x = b.input("x", Shape{4, 8}, DType::f32);
    TensorId w = b.parameter("w", Shape{8, 8}, DType::f32);
    TensorId h = b.op("linear", "fc1", {x, w});
    TensorId a = b.op("test_relu", "act", {h});
    TensorId s = b.op("test_add", "sum", {h, a});
    TensorId y = b.op("linear", "fc2", {s, w});
    b.set_loss(b.op("test_loss", "loss", {y}));
  });
  auto g = add_backward(fwd, autograd_test_ops());
  ASSERT_TRUE(g) << g.error().to_string();
  ASSERT_TRUE(check_structure(*g)) << check_structure(*g).error().to_string();

  const Op* h_sum = find_op(*g, "fc1.grad.accumulate");
  ASSERT_NE(h_sum, nullptr);
  EXPECT_EQ(h_sum->type, "accumulate");
  EXPECT_EQ(h_sum->pass, Pass::backward);
  EXPECT_FALSE(h_sum->is_mirror());
  EXPECT_EQ(h_sum->annotation, "d0 d1, d0 d1 -> d0 d1");
  EXPECT_EQ(names(*g, h_sum->inputs), (std::vector<std::string>{"fc1.grad.0", "fc1.grad.1"}));
  EXPECT_EQ(names(*g, h_sum->outputs), (std::vector<std::string>{"fc1.grad"}));
  for (TensorId t : h_sum->inputs) {
    EXPECT_EQ(g->tensor(t).role, TensorRole::gradient);
    EXPECT_EQ(g->tensor(t).owner, fwd.ops[0].outputs[0]);
  }
  // fc1's backward reads the sum, which therefore comes before it.
  const Op& fc1 = *find_op(*g, "fc1.backward");
  EXPECT_LT(h_sum->id, fc1.id);
  EXPECT_EQ(names(*g, fc1.inputs), (std::vector<std::string>{"x", "w", "fc1.grad"}));

  const Op* w_sum = find_op(*g, "w.grad.accumulate");
  ASSERT_NE(w_sum, nullptr);
  EXPECT_EQ(names(*g, w_sum->inputs), (std::vector<std::string>{"w.grad.0", "w.grad.1"}));
  const FullTensor& w_grad = g->tensor(w_sum->outputs.at(0));
  EXPECT_EQ(w_grad.name, "w.grad");
  EXPECT_EQ(w_grad.owner, fwd.parameters[0]);
  auto valid = validate_graph(*g, autograd_test_ops());
  EXPECT_TRUE(valid) << valid.error().to_string();
  // Exactly one backward op per forward op, plus the seed and the two sums.
  EXPECT_EQ(count_pass(*g, Pass::backward), fwd.ops.size() + 3);
}

TEST(AddBackward, OneOpReadingATensorTwiceGivesTwoPartials) {
  const Graph fwd = build([](GraphBuilder& b) {
    TensorId x = b.input("x", Shape{4, 8}, DType::f32);
    TensorId w = b.parameter("w", Shape{8, 8}, DType::f32);
    TensorId h = b.op("linear", "fc", {x, w});
    b.set_loss(b.op("test_loss", "loss", {b.op("test_add", "double", {h, h})}));
  });
  auto g = add_backward(fwd, autograd_test_ops());
  ASSERT_TRUE(g) << g.error().to_string();
  const Op& twice = *find_op(*g, "double.backward");
  EXPECT_EQ(mirror_layout(twice)->grad_inputs, (std::vector<int>{0, 1}));
  EXPECT_EQ(names(*g, twice.inputs), (std::vector<std::string>{"double.grad"}));  // saves no inputs
  EXPECT_EQ(names(*g, twice.outputs), (std::vector<std::string>{"fc.grad.0", "fc.grad.1"}));
  ASSERT_NE(find_op(*g, "fc.grad.accumulate"), nullptr);
  ASSERT_TRUE(check_structure(*g));
}

TEST(AddBackward, NoGradientForLabelsOrBranchesOffTheLoss) {
  Graph fwd = build([](GraphBuilder& b) {
    TensorId x = b.input("x", Shape{4, 8}, DType::f32);
    TensorId w = b.parameter("w", Shape{8, 8}, DType::f32);
    TensorId w_target = b.parameter("w_target", Shape{8, 8}, DType::f32);
    TensorId w_unused = b.parameter("w_unused", Shape{8, 8}, DType::f32);
    TensorId logits = b.op("linear", "logits", {x, w});
    // The target depends on a parameter, but enters the loss as a no-gradient input.
    TensorId target = b.op("linear", "target", {x, w_target});
    b.op("linear", "dead", {x, w_unused});
    b.op("test_argmax", "argmax", {logits});  // not differentiable, off the loss anyway
    b.set_loss(b.op("test_ce", "loss", {logits, target}));
  });
  auto g = add_backward(fwd, autograd_test_ops());
  ASSERT_TRUE(g) << g.error().to_string();
  const Op& loss = *find_op(*g, "loss.backward");
  EXPECT_EQ(mirror_layout(loss)->grad_inputs, (std::vector<int>{0}));
  EXPECT_EQ(names(*g, loss.outputs), (std::vector<std::string>{"logits.grad"}));
  for (const char* absent : {"target.backward", "dead.backward", "argmax.backward"})
    EXPECT_EQ(find_op(*g, absent), nullptr) << absent;
  for (const char* absent : {"target.grad", "w_target.grad", "w_unused.grad", "x.grad", "dead.grad"})
    EXPECT_EQ(find_tensor(*g, absent), nullptr) << absent;
  EXPECT_NE(find_tensor(*g, "w.grad"), nullptr);
}

TEST(AddBackward, OnlyOutputsWithGradientsAreRead) {
  const Graph fwd = build([](GraphBuilder& b) {
    TensorId x = b.input("x", Shape{4, 8}, DType::f32);
    TensorId w = b.parameter("w", Shape{8, 8}, DType::f32);
    std::vector<TensorId> parts = b.ops("test_twice", "split", {b.op("linear", "fc", {x, w})});
    b.set_loss(b.op("test_loss", "loss", {parts.at(1)}));
  });
  auto g = add_backward(fwd, autograd_test_ops());
  ASSERT_TRUE(g) << g.error().to_string();
  const Op& split = *find_op(*g, "split.backward");
  EXPECT_EQ(mirror_layout(split)->grad_outputs, (std::vector<int>{1}));
  EXPECT_EQ(names(*g, split.inputs), (std::vector<std::string>{"fc", "split:1.grad"}));
}

TEST(AddBackward, IntegerInputsGetNoGradient) {
  ops::OpRegistry r;
  ops::register_autograd_ops(r);
  r.add_builtin({.type = "lookup", .signature = fixed_signature("n, v d -> n d")});
  r.add_builtin({.type = "test_loss", .signature = fixed_signature("a+ b+ -> ")});
  GraphBuilder b("g", r);
  TensorId ids = b.input("ids", Shape{4}, DType::i64);
  TensorId table = b.parameter("table", Shape{10, 8}, DType::f32);
  b.set_loss(b.op("test_loss", "loss", {b.op("lookup", "embed", {ids, table})}));
  auto fwd = std::move(b).finish();
  ASSERT_TRUE(fwd) << fwd.error().to_string();
  auto g = add_backward(*fwd, r);
  ASSERT_TRUE(g) << g.error().to_string();
  EXPECT_EQ(mirror_layout(*find_op(*g, "embed.backward"))->grad_inputs, (std::vector<int>{1}));
  EXPECT_EQ(find_tensor(*g, "ids.grad"), nullptr);
}

TEST(AddBackward, FailsWithoutALoss) {
  GraphBuilder b("noloss", autograd_test_ops());
  TensorId x = b.input("x", Shape{4, 8}, DType::f32);
  b.op("linear", "fc", {x, b.parameter("w", Shape{8, 8}, DType::f32)});
  auto fwd = std::move(b).finish();
  ASSERT_TRUE(fwd);
  auto g = add_backward(*fwd, autograd_test_ops());
  ASSERT_FALSE(g);
  EXPECT_NE(g.error().message.find("has no loss"), std::string::npos) << g.error().message;
}

TEST(AddBackward, FailsWhenTheLossDependsOnNoParameter) {
  const Graph fwd = build([](GraphBuilder& b) {
    TensorId x = b.input("x", Shape{4, 8}, DType::f32);
    TensorId y = b.input("y", Shape{8, 8}, DType::f32);
    b.parameter("w", Shape{8, 8}, DType::f32);
    b.set_loss(b.op("test_loss", "loss", {b.op("linear", "fc", {x, y})}));
  });
  auto g = add_backward(fwd, autograd_test_ops());
  ASSERT_FALSE(g);
  EXPECT_NE(g.error().message.find("nothing to train"), std::string::npos) << g.error().message;
}

TEST(AddBackward, FailsOnAnOpTypeMissingFromTheCatalog) {
  const Graph fwd = mlp();
  ops::OpRegistry without_relu;
  ops::register_linalg_ops(without_relu);
  ops::register_autograd_ops(without_relu);
  without_relu.add_builtin({.type = "test_loss", .signature = fixed_signature("a+ b+ -> ")});
  auto g = add_backward(fwd, without_relu);
  ASSERT_FALSE(g);
  EXPECT_NE(g.error().message.find("'test_relu'"), std::string::npos) << g.error().message;
}

TEST(AddBackward, RejectsAGraphThatAlreadyHasABackwardPass) {
  auto once = add_backward(mlp(), autograd_test_ops());
  ASSERT_TRUE(once);
  EXPECT_FALSE(add_backward(*once, autograd_test_ops()));
}

TEST(AddBackward, IsDeterministic) {
  auto a = add_backward(mlp(), autograd_test_ops());
  auto b = add_backward(mlp(), autograd_test_ops());
  ASSERT_TRUE(a && b);
  EXPECT_EQ(*a, *b);
}

TEST(AddBackward, HandlesLongChains) {
  // Linear passes: a deep residual-free chain of thousands of ops.
  constexpr int kLayers = 3000;
  const Graph fwd = build([](GraphBuilder& b) {
    TensorId h = b.input("x", Shape{2, 4}, DType::f32);
    for (int i = 0; i < kLayers; ++i) {
      TensorId w = b.parameter(fmt::format("w{}", i), Shape{4, 4}, DType::f32);
      h = b.op("linear", fmt::format("fc{}", i), {h, w});
    }
    b.set_loss(b.op("test_loss", "loss", {h}));
  });
  auto g = add_backward(fwd, autograd_test_ops());
  ASSERT_TRUE(g) << g.error().to_string();
  EXPECT_EQ(count_pass(*g, Pass::backward), static_cast<std::size_t>(kLayers + 2));
  EXPECT_TRUE(check_structure(*g));
}

TEST(MirrorLayout, RejectsOpsWithoutALayout) {
  auto g = add_backward(mlp(), autograd_test_ops());
  ASSERT_TRUE(g);
  EXPECT_FALSE(mirror_layout(g->ops[0]));  // a forward op

  Op op = *find_op(*g, "fc2.backward");
  ASSERT_TRUE(mirror_layout(op));
  Op missing = op;
  missing.attrs.erase("grad_inputs");
  EXPECT_FALSE(mirror_layout(missing));
  Op mistyped = op;
  mistyped.attrs["saved_inputs"] = std::int64_t{1};
  EXPECT_FALSE(mirror_layout(mistyped));
  Op unordered = op;
  unordered.attrs["grad_inputs"] = std::vector<std::int64_t>{1, 0};
  EXPECT_FALSE(mirror_layout(unordered));
  Op miscounted = op;
  miscounted.attrs["grad_inputs"] = std::vector<std::int64_t>{1};
  auto result = mirror_layout(miscounted);
  ASSERT_FALSE(result);
  EXPECT_NE(result.error().message.find("writes 2 gradients"), std::string::npos) << result.error().message;
}

}  // namespace
}  // namespace loom::ir
