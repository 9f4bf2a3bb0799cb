#include "loom/ir/validate.h"

#include <gtest/gtest.h>

#include "tiny_graph.h"

#include "loom/ir/autograd.h"
#include "loom/ir/graph_builder.h"
#include "loom/ops/registry.h"

namespace loom::ir {
namespace {

const OpCatalog& catalog() { return ops::builtin_ops(); }
using testing::tiny_graph;

// tiny_graph plus, by hand, a seed gradient for fc (tensor 5, op 2) and the backward op mirroring
// fc that gives w's gradient (tensor 6, op 3).
Graph with_backward() {
  Graph g = tiny_graph();
  const TensorId x(0), w(1), fc(3);
  TensorId dfc = g.add_tensor({{}, "fc.grad", Shape{2, 4}, DType::f32, TensorRole::gradient, fc, {}});
  g.add_op({{}, "fc.grad.seed", "fill_like", {fc}, {dfc}, {{"value", 1.0}}, "d0 d1 -> d0 d1", Pass::backward, {}});
  TensorId dw = g.add_tensor({{}, "w.grad", Shape{4, 3}, DType::f32, TensorRole::gradient, w, {}});
  g.add_op({{},
            "fc.backward",
            "linear",
            {x, w, dfc},
            {dw},
            {{"grad_outputs", std::vector<std::int64_t>{0}},
             {"grad_inputs", std::vector<std::int64_t>{1}},
             {"saved_inputs", true},
             {"saved_outputs", false}},
            g.ops[0].annotation,
            Pass::backward,
            OpId(0)});
  return g;
}

Error error_of(const Graph& graph) {
  Expected<void> valid = validate_graph(graph, catalog());
  EXPECT_FALSE(valid) << "expected the graph to be rejected";
  return valid ? Error{} : valid.error();
}

TEST(ValidateGraph, AcceptsBuiltGraphs) {
  Expected<void> valid = validate_graph(tiny_graph(), catalog());
  EXPECT_TRUE(valid) << valid.error().to_string();
}

TEST(ValidateGraph, AcceptsTrainingGraphsFromAutograd) {
  for (OptimizerKind kind : {OptimizerKind::sgd, OptimizerKind::adam, OptimizerKind::adamw}) {
    OptimizerOptions options;
    options.kind = kind;
    options.momentum = 0.9;
    Expected<Graph> training = build_training_graph(tiny_graph(), catalog(), options);
    ASSERT_TRUE(training) << training.error().to_string();
    Expected<void> valid = validate_graph(*training, catalog());
    EXPECT_TRUE(valid) << name(kind) << ": " << valid.error().to_string();
  }
}

TEST(ValidateGraph, RunsTheStructuralChecksFirst) {
  Graph g = tiny_graph();
  g.ops[0].inputs[0] = TensorId(3);
  EXPECT_EQ(error_of(g).message, "op 'fc' reads tensor 'fc' before any op produces it");
}

TEST(ValidateGraph, UnknownTypeNamesTheOpAndHints) {
  Graph g = tiny_graph();
  g.ops[1].type = "foo";
  const Error error = error_of(g);
  EXPECT_EQ(error.message, "op 'loss' has unknown type 'foo'");
  EXPECT_NE(error.hint.find("loom ops"), std::string::npos);
}

TEST(ValidateGraph, RecordedShapeMustMatchInference) {
  Graph g = tiny_graph();
  g.tensors[3].shape = Shape{2, 5};
  EXPECT_EQ(error_of(g).message,
            "op 'fc' (#0, linear) output 0 ('fc'): recorded shape [2, 5], but the inputs give [2, 4]");
}

TEST(ValidateGraph, RecordedDtypeMustMatchInference) {
  Graph g = tiny_graph();
  g.tensors[3].dtype = DType::bf16;
  EXPECT_EQ(error_of(g).message, "op 'fc' (#0, linear) output 0 ('fc'): recorded dtype bf16, but the inputs give f32");
}

TEST(ValidateGraph, OutputCountMustMatch) {
  Graph g = tiny_graph();
  g.ops[0].outputs.push_back(g.add_tensor({{}, "extra", Shape{1}, DType::f32, TensorRole::activation, {}, {}}));
  EXPECT_EQ(error_of(g).message, "op 'fc' (#0, linear) records 2 outputs, but its type gives 1");
}

TEST(ValidateGraph, AnnotationMayDifferInSpellingButNotInMeaning) {
  Graph g = tiny_graph();
  g.ops[0].annotation = "*  i+,o i+->* o";
  EXPECT_TRUE(validate_graph(g, catalog()));
  g.ops[0].annotation = "* i, o i -> * o";
  EXPECT_EQ(error_of(g).message,
            "op 'fc' (#0, linear): recorded annotation '* i, o i -> * o', but its type gives '* i+, o i+ -> * o'");
  g.ops[0].annotation = "* i+ -> ((";
  EXPECT_TRUE(error_of(g).message.starts_with("op 'fc' (#0, linear): recorded annotation: ")) << error_of(g).message;
}

TEST(ValidateGraph, AttributesAreCheckedAgainstTheSchema) {
  Graph g = tiny_graph();
  g.ops[1].attrs.clear();
  EXPECT_TRUE(error_of(g).message.starts_with("op 'loss' (#1, einsum): op type 'einsum' needs attribute 'equation'"))
      << error_of(g).message;
  // The hint says what to add (fuzzing found a missing attribute reported with no fix).
  EXPECT_EQ(error_of(g).hint, "add \"equation\", a string value, to the op's \"attrs\"");
  g.ops[1].attrs = {{"equation", std::int64_t{3}}};
  EXPECT_EQ(error_of(g).message,
            "op 'loss' (#1, einsum): attribute 'equation' of op type 'einsum' must be string but is integer (3)");
  EXPECT_TRUE(error_of(g).hint.starts_with("give 'equation' a string value: ")) << error_of(g).hint;
}

TEST(ValidateGraph, SourceListsMatchRoles) {
  Graph g = tiny_graph();
  g.parameters.pop_back();
  EXPECT_EQ(error_of(g).message, "tensor 'v' (%2) has role parameter but is not in the graph's parameter list");
  g = tiny_graph();
  g.parameters.push_back(TensorId(0));
  EXPECT_EQ(error_of(g).message, "tensor 'x' (%0) is in the graph's parameter list but has role input");
  g = tiny_graph();
  g.parameters.push_back(TensorId(1));
  EXPECT_EQ(error_of(g).message, "tensor 'w' (%1) is listed twice as a graph parameter");
}

TEST(ValidateGraph, RolesMatchWhoProducesATensor) {
  Graph g = tiny_graph();
  g.add_tensor({{}, "orphan", Shape{3}, DType::f32, TensorRole::activation, {}, {}});
  EXPECT_EQ(error_of(g).message, "tensor 'orphan' (%5) has role activation but no op produces it");
  g = tiny_graph();
  g.tensors[3].role = TensorRole::optimizer_state;
  g.tensors[3].owner = TensorId(1);
  g.tensors[3].updates = TensorId(2);
  EXPECT_EQ(error_of(g).message,
            "tensor 'fc' (%3) (optimizer_state f32[2, 4]) updates 'v', which is parameter f32[2, 4]");
}

// A buffer the step writes a new version of (batch norm's running statistics): produced by a forward op, it
// updates a buffer of its shape and dtype; a buffer cannot update a parameter, nor be written unless it is a
// new version.
TEST(ValidateGraph, BuffersMayBeUpdatedByTheirOwnVersions) {
  const auto running_stat = [](Graph g) {
    const TensorId stat = g.add_tensor({{}, "stat", Shape{2, 4}, DType::f32, TensorRole::buffer, {}, {}});
    const TensorId next = g.add_tensor({{}, "stat.updated", Shape{2, 4}, DType::f32, TensorRole::buffer, {}, stat});
    g.add_op({{}, "stat.update", "add", {stat, TensorId(3)}, {next}, {}, "d0 d1, d0 d1 -> d0 d1", Pass::forward, {}});
    return g;
  };
  Graph g = running_stat(tiny_graph());
  Expected<void> valid = validate_graph(g, catalog());
  EXPECT_TRUE(valid) << valid.error().to_string();
  g.tensors[6].updates = TensorId(2);  // the parameter 'v'
  EXPECT_EQ(error_of(g).message, "tensor 'stat.updated' (%6) (buffer f32[2, 4]) updates 'v', which is parameter f32[2, 4]");
  g = running_stat(tiny_graph());
  g.tensors[6].updates = TensorId{};  // a produced buffer that is no new version: a leaf written by an op
  EXPECT_FALSE(validate_graph(g, catalog()));
}

TEST(ValidateGraph, GradientsNameTheirOwner) {
  Graph g = with_backward();
  g.tensors[6].owner = TensorId{};
  EXPECT_EQ(error_of(g).message, "gradient tensor 'w.grad' (%6) has no owner");
  g = with_backward();
  g.tensors[6].owner = TensorId(0);
  EXPECT_EQ(error_of(g).message,
            "gradient tensor 'w.grad' (%6) has shape [4, 3], but the tensor it is the gradient of, 'x', has shape [2, 3]");
}

TEST(ValidateGraph, LossMustBeProduced) {
  Graph g = tiny_graph();
  TensorId s = g.add_tensor({{}, "s", Shape{}, DType::f32, TensorRole::input, {}, {}});
  g.inputs.push_back(s);
  g.loss = s;
  EXPECT_EQ(error_of(g).message, "the loss 's' is not produced by any op");
}

TEST(ValidateGraph, AcceptsAConsistentBackwardOp) {
  Expected<void> valid = validate_graph(with_backward(), catalog());
  EXPECT_TRUE(valid) << valid.error().to_string();
}

TEST(ValidateGraph, BackwardOpMustMatchTheForwardOp) {
  Graph g = with_backward();
  g.ops[3].type = "matmul";
  EXPECT_EQ(error_of(g).message,
            "op 'fc.backward' (#3, matmul) mirrors op 'fc' of type 'linear'; a backward op has the type of the op it "
            "mirrors");
  g = with_backward();
  g.ops[3].annotation = "* i, o i -> * o";
  EXPECT_EQ(error_of(g).message,
            "op 'fc.backward' (#3, linear) has annotation '* i, o i -> * o', but the op it mirrors, 'fc', has "
            "'* i+, o i+ -> * o'");
  g = with_backward();
  g.ops[3].mirror_of = OpId(2);
  EXPECT_EQ(error_of(g).message,
            "op 'fc.backward' (#3, linear) mirrors op 'fc.grad.seed', which is a backward op; a backward op mirrors a "
            "forward op");
  g = with_backward();
  g.ops[1].mirror_of = OpId(0);
  EXPECT_EQ(error_of(g).message, "op 'loss' (#1, einsum) is a forward op but mirrors op #0; only backward ops mirror");
}

TEST(ValidateGraph, ForwardOpHasOneBackwardOp) {
  Graph g = with_backward();
  Op twin = g.ops[3];
  twin.name = "fc.backward.twin";
  twin.outputs = {g.add_tensor({{}, "w.grad.twin", Shape{4, 3}, DType::f32, TensorRole::gradient, TensorId(1), {}})};
  g.add_op(std::move(twin));
  EXPECT_EQ(error_of(g).message,
            "op 'fc' is mirrored by both 'fc.backward' and 'fc.backward.twin'; a forward op has one backward op, or one "
            "input part and one weight part");
}

TEST(ValidateGraph, GradientsLineUpWithTheMirrorLayout) {
  Graph g = with_backward();
  g.ops[3].attrs["grad_inputs"] = std::vector<std::int64_t>{0};  // claims w.grad is x's gradient
  EXPECT_EQ(error_of(g).message,
            "op 'fc.backward' (#3, linear) output 0 ('w.grad') is f32[4, 3], but it is the gradient of 'x', which is "
            "f32[2, 3]");
  g = with_backward();
  g.ops[3].attrs["grad_inputs"] = std::vector<std::int64_t>{0, 1};
  EXPECT_EQ(error_of(g).message,
            "op 'fc.backward' (#3, linear): backward op 'fc.backward' writes 1 gradients but 'grad_inputs' lists 2");
  g = with_backward();
  g.ops[3].attrs["saved_inputs"] = false;
  EXPECT_EQ(error_of(g).message,
            "op 'fc.backward' (#3, linear) has 3 inputs, but its layout wants 0 saved tensors and 1 output gradients");
  g = with_backward();
  std::swap(g.ops[3].inputs[0], g.ops[3].inputs[1]);
  EXPECT_EQ(error_of(g).message,
            "op 'fc.backward' (#3, linear) input 0 is 'w', but the saved tensor there is 'x' of op 'fc'");
  g = with_backward();
  g.ops[3].inputs[2] = TensorId(2);  // v has fc's shape and dtype, but is no gradient of it
  EXPECT_EQ(error_of(g).message, "op 'fc.backward' (#3, linear) input 2 ('v') must be a gradient owned by 'fc'");
}

}  // namespace
}  // namespace loom::ir
