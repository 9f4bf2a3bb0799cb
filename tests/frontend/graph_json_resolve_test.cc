// Graph files whose ops leave out "annotation" (as the Python tracer writes them): load_graph_file
// resolves each from the registry, and the result equals the graph the engine built itself.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "loom/frontend/graph_file.h"
#include "loom/ir/autograd.h"
#include "loom/ir/graph_json.h"
#include "loom/models/zoo.h"
#include "loom/ops/registry.h"

namespace loom::frontend {
namespace {

namespace fs = std::filesystem;

ir::Graph small_gpt(bool training) {
  models::ModelOptions options;
  options.batch = 2;
  options.seq = 8;
  options.layers = 1;
  options.shrink = true;
  Expected<ir::Graph> forward = models::build_model("gpt3-125m", options);
  EXPECT_TRUE(forward) << forward.error().to_string();
  if (!training) return forward.value_or(ir::Graph{});
  Expected<ir::Graph> graph = ir::build_training_graph(*forward, ops::builtin_ops(), ir::OptimizerOptions{});
  EXPECT_TRUE(graph) << graph.error().to_string();
  return graph.value_or(ir::Graph{});
}

// The graph's JSON with every op's "annotation" removed; `edit` may change ops further.
std::string without_annotations(const ir::Graph& graph, const std::function<void(nlohmann::json&)>& edit = {}) {
  nlohmann::json root = nlohmann::json::parse(ir::graph_to_json(graph));
  for (nlohmann::json& op : root["ops"]) op.erase("annotation");
  if (edit) edit(root);
  return root.dump();
}

class GraphJsonResolve : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    file_ = (fs::path(::testing::TempDir()) / fmt::format("loom_resolve_{}_{}.json", info->name(), ::getpid())).string();
  }
  void TearDown() override { fs::remove(file_); }
  Expected<ir::Graph> load(const std::string& text) const {
    std::ofstream(file_, std::ios::binary) << text;
    return load_graph_file(file_, ops::builtin_ops());
  }
  std::string file_;
};

TEST_F(GraphJsonResolve, ForwardOpsWithoutAnnotationsGetTheRegistrysOnes) {
  const ir::Graph graph = small_gpt(/*training=*/false);
  Expected<ir::Graph> loaded = load(without_annotations(graph));
  ASSERT_TRUE(loaded) << loaded.error().to_string();
  EXPECT_EQ(*loaded, graph);
}

TEST_F(GraphJsonResolve, BackwardOpsTakeTheirForwardOpsAnnotation) {
  const ir::Graph graph = small_gpt(/*training=*/true);
  Expected<ir::Graph> loaded = load(without_annotations(graph));
  ASSERT_TRUE(loaded) << loaded.error().to_string();
  EXPECT_EQ(*loaded, graph);
}

TEST_F(GraphJsonResolve, RecordedAnnotationsAreKeptAndChecked) {
  const ir::Graph graph = small_gpt(/*training=*/false);
  // Only op 0 keeps its (wrong) annotation: validation still compares it with the registry's.
  nlohmann::json root = nlohmann::json::parse(ir::graph_to_json(graph));
  for (std::size_t k = 1; k < root["ops"].size(); ++k) root["ops"][k].erase("annotation");
  root["ops"][0]["annotation"] = "a, b -> a b";
  Expected<ir::Graph> loaded = load(root.dump());
  ASSERT_FALSE(loaded);
  EXPECT_TRUE(loaded.error().message.starts_with(file_ + ": op '" + graph.ops[0].name + "'")) << loaded.error().message;
}

TEST_F(GraphJsonResolve, AnUnknownTypeNamesTheOpAndTheFile) {
  const ir::Graph graph = small_gpt(/*training=*/false);
  Expected<ir::Graph> loaded = load(without_annotations(graph, [](nlohmann::json& root) { root["ops"][2]["type"] = "fft"; }));
  ASSERT_FALSE(loaded);
  EXPECT_EQ(loaded.error().message,
            fmt::format("{}: op '{}' (#2, fft): unknown op type 'fft'", file_, graph.ops[2].name));
  EXPECT_EQ(loaded.error().hint, "`loom ops` lists the known types");
}

TEST_F(GraphJsonResolve, AttributesTheSignatureRejectsNameTheOpAndTheFile) {
  const ir::Graph graph = small_gpt(/*training=*/false);
  std::size_t index = 0;
  while (index < graph.ops.size() && graph.ops[index].type != "transpose") ++index;
  ASSERT_LT(index, graph.ops.size());
  Expected<ir::Graph> loaded =
      load(without_annotations(graph, [index](nlohmann::json& root) { root["ops"][index]["attrs"]["dim0"] = 9; }));
  ASSERT_FALSE(loaded);
  const std::string prefix = fmt::format("{}: op '{}' (#{}, transpose)", file_, graph.ops[index].name, index);
  EXPECT_TRUE(loaded.error().message.starts_with(prefix)) << loaded.error().message;
}

TEST_F(GraphJsonResolve, ARecordedShapeTheInputsDoNotGiveIsStillAnError) {
  const ir::Graph graph = small_gpt(/*training=*/false);
  const std::size_t out = graph.ops[0].outputs[0].index();
  Expected<ir::Graph> loaded =
      load(without_annotations(graph, [out](nlohmann::json& root) { root["tensors"][out]["shape"][0] = 3; }));
  ASSERT_FALSE(loaded);
  EXPECT_NE(loaded.error().message.find("recorded shape"), std::string::npos) << loaded.error().message;
}

}  // namespace
}  // namespace loom::frontend
