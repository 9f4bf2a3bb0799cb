#include "loom/frontend/graph_file.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "loom/ir/graph_builder.h"
#include "loom/ir/graph_json.h"
#include "loom/ops/registry.h"

namespace loom::frontend {
namespace {

namespace fs = std::filesystem;

ir::Graph tiny_graph() {
  ir::GraphBuilder b("tiny", ops::builtin_ops());
  ir::TensorId x = b.input("x", {2, 3}, ir::DType::f32);
  ir::TensorId w = b.parameter("w", {4, 3}, ir::DType::f32);
  ir::TensorId v = b.parameter("v", {2, 4}, ir::DType::f32);
  ir::TensorId fc = b.op("linear", "fc", {x, w});
  b.set_loss(b.op("einsum", "loss", {fc, v}, {{"equation", std::string("ij,ij->")}}));
  Expected<ir::Graph> graph = std::move(b).finish();
  EXPECT_TRUE(graph) << graph.error().to_string();
  return graph.value_or(ir::Graph{});
}

// A fresh directory per test, removed afterwards.
class GraphFile : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::path(::testing::TempDir()) / fmt::format("loom_graph_file_{}_{}", info->name(), ::getpid());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  static void write(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }
  static std::string read(const std::string& path) {
    std::ostringstream text;
    text << std::ifstream(path, std::ios::binary).rdbuf();
    return text.str();
  }
  std::vector<std::string> entries() const {
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(dir_)) names.push_back(entry.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }

  fs::path dir_;
};

TEST_F(GraphFile, SaveThenLoadGivesTheSameGraph) {
  const ir::Graph graph = tiny_graph();
  const std::string file = path("tiny.json");
  ASSERT_TRUE(save_graph_file(graph, file));
  EXPECT_EQ(read(file), ir::graph_to_json(graph));
  Expected<ir::Graph> loaded = load_graph_file(file, ops::builtin_ops());
  ASSERT_TRUE(loaded) << loaded.error().to_string();
  EXPECT_EQ(*loaded, graph);
  EXPECT_EQ(entries(), std::vector<std::string>{"tiny.json"});  // no temporary left behind
}

TEST_F(GraphFile, SaveReplacesAnExistingFile) {
  const std::string file = path("g.json");
  write(file, "old contents");
  ASSERT_TRUE(save_graph_file(tiny_graph(), file));
  EXPECT_EQ(read(file), ir::graph_to_json(tiny_graph()));
  EXPECT_EQ(entries(), std::vector<std::string>{"g.json"});
}

TEST_F(GraphFile, SaveIntoAMissingDirectoryFailsAndWritesNothing) {
  const std::string file = path("no/such/dir/g.json");
  Expected<void> saved = save_graph_file(tiny_graph(), file);
  ASSERT_FALSE(saved);
  EXPECT_EQ(saved.error().message,
            fmt::format("{}: cannot write the graph: directory '{}' does not exist", file, path("no/such/dir")));
  EXPECT_TRUE(entries().empty());
}

TEST_F(GraphFile, LoadingAMissingFileNamesIt) {
  const std::string file = path("missing.json");
  Expected<ir::Graph> loaded = load_graph_file(file, ops::builtin_ops());
  ASSERT_FALSE(loaded);
  EXPECT_EQ(loaded.error().message, fmt::format("{}: cannot read the graph file: no such file", file));
}

TEST_F(GraphFile, LoadingADirectoryIsAnError) {
  Expected<ir::Graph> loaded = load_graph_file(dir_.string(), ops::builtin_ops());
  ASSERT_FALSE(loaded);
  EXPECT_EQ(loaded.error().message, fmt::format("{}: cannot read the graph file: it is a directory, not a regular file", dir_.string()));
}

TEST_F(GraphFile, ParseErrorsArePrefixedWithThePath) {
  const std::string file = path("bad.json");
  write(file, "{\"format\": \"loom-graph\", \"version\": 3}");
  Expected<ir::Graph> loaded = load_graph_file(file, ops::builtin_ops());
  ASSERT_FALSE(loaded);
  EXPECT_EQ(loaded.error().message,
            fmt::format("{}: version: graph format version 3 is not supported (this build reads version 1)", file));
  write(file, "{\"format\": ");
  loaded = load_graph_file(file, ops::builtin_ops());
  ASSERT_FALSE(loaded);
  EXPECT_TRUE(loaded.error().message.starts_with(file + ": line ")) << loaded.error().message;
}

TEST_F(GraphFile, ValidationErrorsArePrefixedWithThePath) {
  ir::Graph graph = tiny_graph();
  graph.ops[1].type = "foo";
  const std::string file = path("unknown_op.json");
  ASSERT_TRUE(save_graph_file(graph, file));
  Expected<ir::Graph> loaded = load_graph_file(file, ops::builtin_ops());
  ASSERT_FALSE(loaded);
  EXPECT_EQ(loaded.error().message, fmt::format("{}: op 'loss' has unknown type 'foo'", file));
  EXPECT_NE(loaded.error().hint.find("loom ops"), std::string::npos);
}

}  // namespace
}  // namespace loom::frontend
