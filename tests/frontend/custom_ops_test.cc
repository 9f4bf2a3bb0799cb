// Custom ops (loom.register_op, docs/custom_ops.md): a graph file's "custom_ops" section is read into a
// CustomCatalog layered over the built-ins; bad definitions are errors naming the op and the fix; the op
// is partitioned as its annotation says, priced by its FLOPs per output element, differentiated (or not)
// as its definition says, and the reference interpreter refuses it with the reason instead of crashing.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "loom/frontend/custom_op_section.h"
#include "loom/frontend/graph_file.h"
#include "loom/ir/autograd.h"
#include "loom/ir/graph_builder.h"
#include "loom/ir/graph_json.h"
#include "loom/ir/graph_stats.h"
#include "loom/ops/custom_ops.h"
#include "loom/plan/plan.h"
#include "loom/plan/primitives.h"
#include "loom/verify/graph_interpreter.h"

namespace loom::frontend {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kBiasGelu = "b s h, h -> b s h";

ops::CustomOpSpec bias_gelu_spec(std::string annotation = kBiasGelu, bool differentiable = true) {
  return {.type = "custom.bias_gelu", .annotation = std::move(annotation), .flops_per_element = 8,
          .differentiable = differentiable};
}

// x [4, 6, 8] -> linear -> custom.bias_gelu(., bias) -> einsum with v -> scalar loss.
ir::Graph fused_mlp(const ir::OpCatalog& catalog) {
  ir::GraphBuilder b("fused_mlp", catalog);
  const ir::TensorId x = b.input("x", {4, 6, 8}, ir::DType::f32);
  const ir::TensorId w = b.parameter("up.weight", {8, 8}, ir::DType::f32);
  const ir::TensorId bias = b.parameter("bias", {8}, ir::DType::f32);
  const ir::TensorId v = b.parameter("v", {4, 6, 8}, ir::DType::f32);
  const ir::TensorId up = b.op("linear", "up", {x, w});
  const ir::TensorId act = b.op("custom.bias_gelu", "act", {up, bias}, {{"callable", std::string("mymodel:bias_gelu")}});
  b.set_loss(b.op("einsum", "loss", {act, v}, {{"equation", std::string("bsh,bsh->")}}));
  Expected<ir::Graph> graph = std::move(b).finish();
  EXPECT_TRUE(graph) << graph.error().to_string();
  return graph.value_or(ir::Graph{});
}

// The graph file the Python tracer writes: no annotations, a "custom_ops" section.
std::string traced_file_text(const std::vector<json>& definitions) {
  ops::CustomCatalog catalog(ops::builtin_ops());
  EXPECT_TRUE(catalog.add(bias_gelu_spec()));
  json root = json::parse(ir::graph_to_json(fused_mlp(catalog)));
  for (json& op : root["ops"]) op.erase("annotation");
  root["custom_ops"] = definitions;
  return root.dump();
}

json definition(const std::string& annotation = kBiasGelu) {
  return {{"type", "custom.bias_gelu"}, {"annotation", annotation}, {"flops_per_element", 8}, {"differentiable", true}};
}

class CustomOps : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    file_ = (fs::path(::testing::TempDir()) / fmt::format("loom_custom_{}_{}.json", info->name(), ::getpid())).string();
  }
  void TearDown() override { fs::remove(file_); }
  Expected<ir::Graph> load(const std::string& text, ops::CustomCatalog& catalog) const {
    std::ofstream(file_, std::ios::binary) << text;
    return load_graph_file(file_, catalog);
  }
  std::string file_;
};

std::string message(const Error& e) { return e.message + " | " + e.hint; }

TEST(CustomOpSection, ReadsTheDefinitionsAndLeavesTheGraphToTheStrictReader) {
  Expected<SplitGraphText> split = split_custom_ops(traced_file_text({definition()}));
  ASSERT_TRUE(split) << split.error().to_string();
  ASSERT_EQ(split->custom_ops.size(), 1u);
  EXPECT_EQ(split->custom_ops[0].type, "custom.bias_gelu");
  EXPECT_EQ(split->custom_ops[0].annotation, kBiasGelu);
  EXPECT_EQ(split->custom_ops[0].flops_per_element, 8);
  EXPECT_TRUE(split->custom_ops[0].differentiable);
  EXPECT_FALSE(json::parse(split->graph_json).contains("custom_ops"));
  EXPECT_TRUE(ir::graph_from_json(split->graph_json));
}

TEST(CustomOpSection, TextWithoutTheSectionComesBackUnchanged) {
  for (const std::string& text : {std::string(R"({"format": "loom-graph", "version": 1})"), std::string("not json {")}) {
    Expected<SplitGraphText> split = split_custom_ops(text);
    ASSERT_TRUE(split);
    EXPECT_EQ(split->graph_json, text);
    EXPECT_TRUE(split->custom_ops.empty());
  }
}

TEST(CustomOpSection, MalformedDefinitionsNameTheirPath) {
  const std::vector<std::pair<json, std::string>> cases = {
      {json::object(), "custom_ops: expected an array"},
      {json::array({json{{"type", "custom.a"}}}), "custom_ops[0].annotation: missing"},
      {json::array({json{{"type", "custom.a"}, {"annotation", "a -> a"}, {"flop", 1}}}), "custom_ops[0]: unknown field 'flop'"},
      {json::array({json{{"type", "custom.a"}, {"annotation", "a -> a"}, {"flops_per_element", "8"}}}),
       "custom_ops[0].flops_per_element: not a number"},
      {json::array({json{{"type", 3}, {"annotation", "a -> a"}}}), "custom_ops[0].type: not a string"},
  };
  for (const auto& [section, expected] : cases) {
    json root = {{"format", "loom-graph"}, {"custom_ops", section}};
    Expected<SplitGraphText> split = split_custom_ops(root.dump());
    ASSERT_FALSE(split) << expected;
    EXPECT_NE(split.error().message.find(expected), std::string::npos) << split.error().message;
  }
}

TEST(CustomCatalog, BadDefinitionsAreErrorsNamingTheOpAndTheFix) {
  const std::vector<std::pair<ops::CustomOpSpec, std::string>> cases = {
      {{.type = "custom.f", .annotation = "a b, b -> a (", .flops_per_element = 0, .differentiable = true}, "does not parse"},
      {{.type = "custom.f", .annotation = "a b -> a c", .flops_per_element = 0, .differentiable = true},
       "output identifier 'c' appears in no input"},
      {{.type = "custom.f", .annotation = "a -> *", .flops_per_element = 0, .differentiable = true}, "uses '*' but no input"},
      {{.type = "f", .annotation = "a -> a", .flops_per_element = 0, .differentiable = true}, "custom.<name>"},
      {{.type = "custom.f", .annotation = "a -> a", .flops_per_element = -1, .differentiable = true}, "FLOPs"},
      {{.type = "matmul", .annotation = "m k+, k+ n -> m n", .flops_per_element = 2, .differentiable = true},
       "duplicates a built-in op type"},
  };
  for (const auto& [spec, expected] : cases) {
    ops::CustomCatalog catalog(ops::builtin_ops());
    Expected<void> added = catalog.add(spec);
    ASSERT_FALSE(added) << expected;
    EXPECT_NE(added.error().message.find(expected), std::string::npos) << added.error().message;
    EXPECT_NE(added.error().message.find(spec.type), std::string::npos) << "names the op: " << added.error().message;
    EXPECT_FALSE(added.error().hint.empty()) << "gives the fix: " << added.error().message;
  }
  ops::CustomCatalog catalog(ops::builtin_ops());
  ASSERT_TRUE(catalog.add(bias_gelu_spec()));
  Expected<void> twice = catalog.add(bias_gelu_spec());
  ASSERT_FALSE(twice);
  EXPECT_NE(twice.error().message.find("defined twice"), std::string::npos);
}

TEST(CustomCatalog, LayersOverTheBuiltinsWithoutChangingThem) {
  ops::CustomCatalog catalog(ops::builtin_ops());
  ASSERT_TRUE(catalog.add(bias_gelu_spec()));
  EXPECT_NE(catalog.find("custom.bias_gelu"), nullptr);
  EXPECT_EQ(catalog.find("matmul"), ops::builtin_ops().find("matmul"));
  EXPECT_EQ(ops::builtin_ops().find("custom.bias_gelu"), nullptr);
  EXPECT_EQ(catalog.find("custom.bias_gelu")->family, "custom");
}

TEST_F(CustomOps, AGraphFileWithCustomOpsLoadsIntoTheCatalogAndTrains) {
  ops::CustomCatalog catalog(ops::builtin_ops());
  Expected<ir::Graph> graph = load(traced_file_text({definition()}), catalog);
  ASSERT_TRUE(graph) << graph.error().to_string();
  const ir::Op& act = graph->ops[1];
  ASSERT_EQ(act.type, "custom.bias_gelu");
  EXPECT_EQ(act.annotation, kBiasGelu);
  Expected<ir::Graph> training = ir::build_training_graph(*graph, catalog, {});
  ASSERT_TRUE(training) << training.error().to_string();
  int mirrors = 0;
  for (const ir::Op& op : training->ops) mirrors += op.is_mirror() && training->op(op.mirror_of).type == act.type;
  EXPECT_EQ(mirrors, 1) << "one backward op, by autograd of the function";
  // FLOPs per output element x the output's 4 * 6 * 8 elements.
  Expected<std::vector<double>> flops = ir::op_flops(*graph, catalog);
  ASSERT_TRUE(flops);
  EXPECT_DOUBLE_EQ((*flops)[1], 8.0 * 4 * 6 * 8);
}

TEST_F(CustomOps, ANonDifferentiableCustomOpGetsNoBackward) {
  json def = definition();
  def["differentiable"] = false;
  ops::CustomCatalog catalog(ops::builtin_ops());
  Expected<ir::Graph> graph = load(traced_file_text({def}), catalog);
  ASSERT_TRUE(graph) << graph.error().to_string();
  Expected<ir::Graph> training = ir::build_training_graph(*graph, catalog, {});
  ASSERT_TRUE(training) << training.error().to_string();
  for (const ir::Op& op : training->ops)
    EXPECT_FALSE(op.is_mirror() && training->op(op.mirror_of).type == "custom.bias_gelu");
}

TEST_F(CustomOps, AnAnnotationThatDoesNotFitTheCallNamesTheOpAndTheFix) {
  ops::CustomCatalog catalog(ops::builtin_ops());
  Expected<ir::Graph> graph = load(traced_file_text({definition("b h, h -> b h")}), catalog);
  ASSERT_FALSE(graph);
  const std::string text = message(graph.error());
  EXPECT_NE(text.find("op 'act'"), std::string::npos) << text;
  EXPECT_NE(text.find("custom.bias_gelu"), std::string::npos) << text;
  EXPECT_NE(text.find("loom.register_op"), std::string::npos) << text;
}

// The traced file with the custom op's attributes replaced by `attrs`.
std::string with_custom_attrs(const json& attrs) {
  json root = json::parse(traced_file_text({definition()}));
  for (json& op : root["ops"])
    if (op["type"] == "custom.bias_gelu") op["attrs"] = attrs;
  return root.dump();
}

// A call whose attribute is what is wrong names it, and the hint gives the attribute, not the annotation
// (found by the graph fuzz target: a missing "callable" was blamed on the annotation).
TEST_F(CustomOps, AMissingOrWrongCallableIsNamedNotBlamedOnTheAnnotation) {
  const std::string hint =
      "give the op its one attribute, \"callable\": \"module:qualname\", naming the registered Python function "
      "(the tracer writes it; docs/custom_ops.md)";
  const std::vector<std::pair<json, std::string>> cases = {
      {json::object(), "op type 'custom.bias_gelu' needs attribute 'callable'"},
      {json{{"callable", 5}}, "attribute 'callable' of op type 'custom.bias_gelu' must be string but is integer"},
      {json{{"callable", "m:f"}, {"extra", 1}}, "op type 'custom.bias_gelu' has no attribute 'extra'"},
  };
  for (const auto& [attrs, names] : cases) {
    ops::CustomCatalog catalog(ops::builtin_ops());
    Expected<ir::Graph> graph = load(with_custom_attrs(attrs), catalog);
    ASSERT_FALSE(graph) << attrs.dump();
    EXPECT_NE(graph.error().message.find("op 'act' (#1, custom.bias_gelu): " + names), std::string::npos)
        << graph.error().message;
    EXPECT_EQ(graph.error().message.find("annotation"), std::string::npos) << graph.error().message;
    EXPECT_EQ(graph.error().hint, hint);
  }
}

TEST_F(CustomOps, AnUndefinedCustomOpAndTheBuiltinOnlyReaderAreClearErrors) {
  ops::CustomCatalog catalog(ops::builtin_ops());
  Expected<ir::Graph> undefined = load(traced_file_text({}), catalog);
  ASSERT_FALSE(undefined);
  EXPECT_NE(undefined.error().message.find("unknown op type 'custom.bias_gelu'"), std::string::npos);
  std::ofstream(file_, std::ios::binary) << traced_file_text({definition()});
  Expected<ir::Graph> builtin_only = load_graph_file(file_, ops::builtin_ops());
  ASSERT_FALSE(builtin_only);
  EXPECT_NE(builtin_only.error().message.find("custom ops (custom.bias_gelu"), std::string::npos)
      << builtin_only.error().message;
}

// The custom op's first live sub-op split along `identifier` in two: the output pieces' shapes and the
// bias input's.
struct SplitShapes {
  std::vector<ir::Shape> outputs;
  std::vector<ir::Shape> bias;
};
Expected<SplitShapes> split_custom(const std::string& annotation, const std::string& identifier) {
  ops::CustomCatalog catalog(ops::builtin_ops());
  LOOM_RETURN_IF_ERROR(catalog.add(bias_gelu_spec(annotation)));
  const ir::Graph graph = fused_mlp(catalog);
  LOOM_ASSIGN_OR_RETURN(plan::Plan plan, plan::make_plan(graph, catalog));
  LOOM_ASSIGN_OR_RETURN(std::vector<plan::SubOpId> parts,
                        plan::trans(plan, plan.parts[1].front(), plan::SplitAlgo{.identifier = identifier}, 2));
  SplitShapes shapes;
  for (plan::SubOpId part : parts) {
    shapes.outputs.push_back(plan.sub_op(part).outputs[0].local_shape());
    shapes.bias.push_back(plan.sub_op(part).inputs[1].local_shape());
  }
  return shapes;
}

TEST(CustomOpPartitioning, FollowsTheAnnotation) {
  Expected<SplitShapes> by_batch = split_custom(kBiasGelu, "b");
  ASSERT_TRUE(by_batch) << by_batch.error().to_string();
  EXPECT_EQ(by_batch->outputs, (std::vector<ir::Shape>{{2, 6, 8}, {2, 6, 8}}));
  EXPECT_EQ(by_batch->bias, (std::vector<ir::Shape>{{8}, {8}})) << "the bias lacks b: replicated";
  Expected<SplitShapes> by_hidden = split_custom(kBiasGelu, "h");
  ASSERT_TRUE(by_hidden) << by_hidden.error().to_string();
  EXPECT_EQ(by_hidden->outputs, (std::vector<ir::Shape>{{4, 6, 4}, {4, 6, 4}}));
  EXPECT_EQ(by_hidden->bias, (std::vector<ir::Shape>{{4}, {4}}));
  // A frozen dimension must not be split: the function mixes across it.
  Expected<SplitShapes> frozen = split_custom("b s h^, h^ -> b s h^", "h");
  ASSERT_FALSE(frozen);
  EXPECT_NE(frozen.error().message.find("h"), std::string::npos);
}

TEST(CustomOpInterpreter, RefusesWithTheReasonInsteadOfCrashing) {
  ops::CustomCatalog catalog(ops::builtin_ops());
  ASSERT_TRUE(catalog.add(bias_gelu_spec()));
  const ir::Graph graph = fused_mlp(catalog);
  Expected<std::vector<verify::NdArray>> run = verify::run_graph(graph, verify::initial_values(graph, 1));
  ASSERT_FALSE(run);
  EXPECT_NE(run.error().message.find("no reference kernel for 'custom.bias_gelu'"), std::string::npos)
      << run.error().message;
  EXPECT_NE(run.error().hint.find("runtime's equivalence"), std::string::npos) << run.error().hint;
}

}  // namespace
}  // namespace loom::frontend
