// The graph file's "sizes" section (frontend/graph_sizes.h): read, split off, and applied at another batch;
// errors name the entry and the fix.
#include "loom/frontend/graph_sizes.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "loom/frontend/graph_file.h"
#include "loom/ir/graph_builder.h"
#include "loom/ir/graph_json.h"
#include "loom/ops/registry.h"

namespace loom::frontend {
namespace {

// x [2, 3] -> view [6] -> view [2, 3] -> linear [2, 4] -> sum: the batch in shapes and in view targets.
std::string graph_text() {
  ir::GraphBuilder b("tiny", ops::builtin_ops());
  ir::TensorId x = b.input("x", {2, 3}, ir::DType::f32);
  ir::TensorId w = b.parameter("w", {4, 3}, ir::DType::f32);
  ir::TensorId flat = b.op("view", "flat", {x}, {{"shape", std::vector<std::int64_t>{6}}});
  ir::TensorId back = b.op("view", "back", {flat}, {{"shape", std::vector<std::int64_t>{2, 3}}});
  ir::TensorId fc = b.op("linear", "fc", {back, w});
  b.set_loss(b.op("sum", "loss", {fc}));
  return ir::graph_to_json(std::move(b).finish().value());
}

// The section loom.trace writes for graph_text() at batch 2.
nlohmann::json section() {
  return nlohmann::json::parse(R"({"version": 1, "symbols": {"batch": 2},
    "tensors": [{"id": 0, "shape": ["batch", 3]}, {"id": 2, "shape": ["3*batch"]}, {"id": 3, "shape": ["batch", 3]},
                {"id": 4, "shape": ["batch", 4]}],
    "attrs": [{"op": 0, "name": "shape", "value": ["3*batch"]}, {"op": 1, "name": "shape", "value": ["batch", 3]}]})");
}

std::string with_section(const nlohmann::json& sizes) {
  nlohmann::json root = nlohmann::json::parse(graph_text());
  root["sizes"] = sizes;
  return root.dump();
}

Expected<ir::Graph> load(const std::string& text, std::int64_t batch) {
  ops::CustomCatalog catalog(ops::builtin_ops());
  return load_graph_text(text, "g.json", catalog, batch);
}

TEST(GraphSizes, ResizesShapesAndAttributes) {
  auto graph = load(with_section(section()), 5);
  ASSERT_TRUE(graph) << graph.error().to_string();
  EXPECT_EQ(graph->tensors[0].shape, (ir::Shape{5, 3}));
  EXPECT_EQ(graph->tensors[2].shape, (ir::Shape{15}));
  EXPECT_EQ(graph->tensors[4].shape, (ir::Shape{5, 4}));
  EXPECT_EQ(graph->tensors[1].shape, (ir::Shape{4, 3}));  // the weight is not the batch's
  EXPECT_EQ(std::get<std::vector<std::int64_t>>(graph->ops[0].attrs.at("shape")), (std::vector<std::int64_t>{15}));
  EXPECT_EQ(std::get<std::vector<std::int64_t>>(graph->ops[1].attrs.at("shape")), (std::vector<std::int64_t>{5, 3}));
  // 0 and the traced batch: the graph as written.
  for (std::int64_t batch : {0, 2}) {
    auto same = load(with_section(section()), batch);
    ASSERT_TRUE(same) << same.error().to_string();
    EXPECT_EQ(*same, load(graph_text(), 0).value());
  }
}

TEST(GraphSizes, WithoutTheSectionOnlyTheTracedBatch) {
  EXPECT_TRUE(load(graph_text(), 2));
  const auto other = load(graph_text(), 4);
  ASSERT_FALSE(other);
  EXPECT_EQ(other.error().message,
            "g.json: the graph was traced at batch 2 and does not record which of its sizes are the batch (no \"sizes\" "
            "section), so it cannot be planned at --global-batch 4");
}

TEST(GraphSizes, ErrorsNameTheEntry) {
  const auto error = [](const nlohmann::json& sizes) {
    const auto graph = load(with_section(sizes), 4);
    return graph ? std::string("no error") : graph.error().message;
  };
  nlohmann::json bad = section();
  bad["tensors"][1]["shape"][0] = "3*seq";
  EXPECT_EQ(error(bad), "g.json: sizes.tensors[1].shape[0]: unknown size symbol in '3*seq'");
  bad = section();
  bad["tensors"][1]["shape"][0] = "4*batch";  // 8 at batch 2, the graph holds 6
  EXPECT_EQ(error(bad), "g.json: the sizes section does not match tensor 'flat' ([6]): it records 8 at batch 2 where "
                        "the graph holds 6");
  bad = section();
  bad["version"] = 2;
  EXPECT_EQ(error(bad), "g.json: sizes.version: this engine reads version 1");
  bad = section();
  bad["attrs"][0]["op"] = 9;
  EXPECT_EQ(error(bad), "g.json: the sizes section names op 9, and the graph has 4");
  bad = section();
  bad["tensors"][0]["shape"] = {"batch"};  // rank 1 for a rank-2 tensor
  EXPECT_NE(error(bad).find("does not match tensor 'x'"), std::string::npos) << error(bad);
}

// Found by hand while writing fuzz/graph_fuzz.cc: "tensors" or "attrs" given as a number, string or object was
// indexed by position, which made json throw out of the reader (`loom graph --from` aborted, exit 134).
TEST(GraphSizes, ListsOfAnotherTypeAreErrorsNamingThem) {
  const auto error = [](const nlohmann::json& sizes) {
    const auto graph = load(with_section(sizes), 4);
    return graph ? std::string("no error") : graph.error().message;
  };
  nlohmann::json bad = section();
  bad["tensors"] = 5;
  EXPECT_EQ(error(bad), "g.json: sizes.tensors: expected a list, got number");
  bad = section();
  bad["attrs"] = "shape";
  EXPECT_EQ(error(bad), "g.json: sizes.attrs: expected a list, got string");
  bad = section();
  bad["tensors"] = {{"a", 1}};
  EXPECT_EQ(error(bad), "g.json: sizes.tensors: expected a list, got object");
}

}  // namespace
}  // namespace loom::frontend
