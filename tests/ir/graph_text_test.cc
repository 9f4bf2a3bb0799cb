#include "loom/ir/graph_text.h"

#include <gtest/gtest.h>

namespace loom::ir {
namespace {

// A hand-built training step in miniature: forward linear, its mirrored backward op, an sgd update.
Graph small_step() {
  Graph g;
  g.name = "step";
  const auto tensor = [&](std::string name, Shape shape, DType dtype, TensorRole role, TensorId owner = {},
                          TensorId updates = {}) {
    return g.add_tensor({{}, std::move(name), std::move(shape), dtype, role, owner, updates});
  };
  TensorId x = tensor("x", {8, 16}, DType::bf16, TensorRole::input);
  TensorId w = tensor("fc.weight", {32, 16}, DType::bf16, TensorRole::parameter);
  TensorId y = tensor("fc", {8, 32}, DType::bf16, TensorRole::activation);
  TensorId dy = tensor("fc.grad", {8, 32}, DType::bf16, TensorRole::gradient, y);
  TensorId dw = tensor("fc.weight.grad", {32, 16}, DType::bf16, TensorRole::gradient, w);
  TensorId w2 = tensor("fc.weight \"next\"", {32, 16}, DType::bf16, TensorRole::parameter, {}, w);
  g.inputs = {x};
  g.parameters = {w};
  g.add_op({{}, "fc", "linear", {x, w}, {y}, {}, "* i+, o i+ -> * o", Pass::forward, {}});
  g.add_op({{},
            "fc.backward",
            "linear",
            {x, w, dy},
            {dw},
            {{"grad_inputs", std::vector<std::int64_t>{1}}, {"saved_inputs", true}},
            "* i+, o i+ -> * o",
            Pass::backward,
            OpId(0)});
  g.add_op({{}, "fc.weight.sgd", "sgd", {w, dw}, {w2}, {{"lr", 1.0}, {"tag", std::string("a\tb")}}, "a b, a b -> a b",
            Pass::optimizer, {}});
  g.loss = y;  // not a scalar: the text form prints whatever it is given
  return g;
}

TEST(GraphText, GoldenSmallStep) {
  const std::string expected =
      "graph \"step\"\n"
      "%0 = input \"x\" bf16[8, 16]\n"
      "%1 = parameter \"fc.weight\" bf16[32, 16]\n"
      "%2 = activation \"fc\" bf16[8, 32]\n"
      "%3 = gradient \"fc.grad\" bf16[8, 32]  of %2\n"
      "%4 = gradient \"fc.weight.grad\" bf16[32, 16]  of %1\n"
      "%5 = parameter \"fc.weight \\\"next\\\"\" bf16[32, 16]  updates %1\n"
      "#0 linear \"fc\" (%0, %1) -> (%2)  [* i+, o i+ -> * o]\n"
      "#1 backward linear \"fc.backward\" (%0, %1, %3) -> (%4)  [* i+, o i+ -> * o]  mirrors #0  "
      "{grad_inputs=[1], saved_inputs=true}\n"
      "#2 optimizer sgd \"fc.weight.sgd\" (%1, %4) -> (%5)  [a b, a b -> a b]  {lr=1.0, tag=\"a\\x09b\"}\n"
      "loss %2\n";
  EXPECT_EQ(graph_to_text(small_step()), expected);
}

TEST(GraphText, EmptyGraph) { EXPECT_EQ(graph_to_text(Graph{}), "graph \"\"\n"); }

}  // namespace
}  // namespace loom::ir
