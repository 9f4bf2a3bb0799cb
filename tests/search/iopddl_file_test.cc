#include "loom/search/iopddl_file.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace loom::search {
namespace {

// Copies of the contest's example and instance B (../shared/benchmarks/iopddl/), so a clean clone tests them.
const std::string kBenchmarks = std::string(LOOM_SOURCE_DIR) + "/tests/search/data";

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("loom_iopddl_test_" + name)).string();
}

std::string error_of(const std::string& text) {
  const auto result = parse_iopddl(text, "t.json");
  return result ? std::string("(parsed)") : result.error().message;
}

TEST(ReadIopddl, ReadsTheContestExample) {
  const std::string path = kBenchmarks + "/example.json";
  const Expected<ShardingProblem> p = read_iopddl(path);
  ASSERT_TRUE(p.has_value()) << p.error().to_string();
  EXPECT_EQ(p->name, "example");
  ASSERT_EQ(p->nodes.size(), 5u);
  EXPECT_EQ(p->nodes[2].start, 50);
  EXPECT_EQ(p->nodes[2].end, 120);
  EXPECT_EQ(p->nodes[2].costs, (std::vector<std::int64_t>{25, 45, 35}));
  EXPECT_EQ(p->nodes[2].usages, (std::vector<std::int64_t>{15, 20, 15}));
  ASSERT_EQ(p->edges.size(), 5u);
  EXPECT_EQ(p->edges[2].from, 1);
  EXPECT_EQ(p->edges[2].to, 3);
  EXPECT_EQ(p->edges[2].costs, (std::vector<std::int64_t>{90, 10, 20, 80}));
  EXPECT_EQ(p->usage_limit, 50);
  // The contest's example solution [0, 0, 2, 1, 0] is feasible at its stated cost.
  const auto cost = evaluate_choice(*p, {{0, 0, 2, 1, 0}});
  ASSERT_TRUE(cost.has_value()) << cost.error().to_string();
  EXPECT_EQ(cost->total, 445);
}

TEST(ReadIopddl, ReadsAGzipInstance) {
  const std::string path = kBenchmarks + "/asplos-2025-iopddl-B.json.gz";
  const Expected<ShardingProblem> p = read_iopddl(path);
  ASSERT_TRUE(p.has_value()) << p.error().to_string();
  EXPECT_EQ(p->nodes.size(), 816u);
  EXPECT_EQ(p->edges.size(), 1096u);
  EXPECT_EQ(p->usage_limit, 14392528);
}

TEST(ReadIopddl, SolutionRoundTrips) {
  const std::string path = temp_path("solution.json");
  const ShardingChoice choice{{0, 3, 1, 2}};
  ASSERT_TRUE(write_iopddl_solution(path, choice).has_value());
  std::ifstream in(path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "[0, 3, 1, 2]\n");
  std::filesystem::remove(path);
}

TEST(ParseIopddl, NamesTheMalformedField) {
  EXPECT_NE(error_of("{").find("t.json: line 1 column 2: malformed JSON: "), std::string::npos);
  EXPECT_NE(error_of("{}").find("the file has no 'problem'"), std::string::npos);
  EXPECT_NE(error_of(R"({"problem": {"nodes": {}, "edges": {}}})").find("problem.nodes has no 'intervals'"),
            std::string::npos);
  const std::string base = R"({"problem": {"name": "x", "nodes": {"intervals": [[0, 2], [1, 3]], "costs": COSTS,
      "usages": [[1], [1, 2]]}, "edges": {"nodes": EDGES, "costs": [[1, 2]]}, "usage_limit": 5}})";
  auto with = [&](const std::string& costs, const std::string& edges) {
    std::string text = base;
    text.replace(text.find("COSTS"), 5, costs);
    text.replace(text.find("EDGES"), 5, edges);
    return error_of(text);
  };
  EXPECT_EQ(with("[[1], [2, 3]]", "[[0, 1]]"), "(parsed)");
  EXPECT_NE(with(R"([[1], [2, "x"]])", "[[0, 1]]").find("problem.nodes.costs[1][1] must be an integer"),
            std::string::npos);
  EXPECT_NE(with("[[1], [2, 3.5]]", "[[0, 1]]").find("problem.nodes.costs[1][1]"), std::string::npos);
  EXPECT_NE(with("[[1], [2]]", "[[0, 1]]").find("t.json: problem 'x'"), std::string::npos);  // check_problem's
  EXPECT_NE(with("[[1], [2]]", "[[0, 1]]").find("node 1 has 1 costs but 2 usages"), std::string::npos);
  EXPECT_NE(with("[[1], [2, 3]]", "[[0, 7]]").find("problem.edges.nodes[0] names node 7"), std::string::npos);
  EXPECT_NE(with("[[1], [2, 3]]", "[[0]]").find("problem.edges.nodes[0] must be a pair"), std::string::npos);
  EXPECT_NE(with("[[1], [2, 3], [4]]", "[[0, 1]]").find("2 intervals, 3 cost lists"), std::string::npos);
}

TEST(ReadIopddl, RefusesMissingDirectoriesAndCorruptGzip) {
  EXPECT_NE(read_iopddl(temp_path("absent.json")).error().message.find("no such file"), std::string::npos);
  EXPECT_NE(read_iopddl(std::filesystem::temp_directory_path().string()).error().message.find("not a regular file"),
            std::string::npos);
  const std::string path = temp_path("corrupt.json.gz");
  {
    std::ofstream out(path, std::ios::binary);
    out << "\x1f\x8b\x08\x00garbage that is not deflate";
  }
  const auto result = read_iopddl(path);
  ASSERT_FALSE(result.has_value());
  EXPECT_NE(result.error().message.find("gzip stream is corrupt or truncated"), std::string::npos)
      << result.error().message;
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace loom::search
