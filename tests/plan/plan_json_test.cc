#include "loom/plan/plan_json.h"

#include <gtest/gtest.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "loom/ops/registry.h"
#include "loom/plan/primitives.h"
#include "loom/plan/recompute.h"
#include "loom/plan/residence.h"
#include "loom/plan/validate.h"
#include "plan_test_graph.h"

namespace loom::plan {
namespace {

// The tiny MLP split two ways along its hidden identifier, replicated elsewhere, with one order edge.
Plan split_plan(const ir::Graph& graph) {
  Plan plan = make_plan(graph, ops::builtin_ops()).value();
  for (const ir::Op& op : graph.ops) {
    if (op.is_mirror()) continue;
    const SubOpId whole = plan.parts[op.id.index()].front();
    auto parts = trans(plan, whole, ReplicateAlgo{}, 2).value();
    for (int k = 0; k < 2; ++k) EXPECT_TRUE(assign(plan, parts[static_cast<std::size_t>(k)], k));
  }
  const auto& first = plan.parts.front();
  EXPECT_TRUE(order(plan, first[0], first[1]));
  return plan;
}

TEST(PlanJson, RoundTripsByteIdenticallyAndValidates) {
  const ir::Graph& graph = testing::graph();
  const Plan plan = split_plan(graph);
  const std::string text = plan_to_json(plan);
  auto back = plan_from_json(text, graph, ops::builtin_ops(), "plan.json");
  ASSERT_TRUE(back) << back.error().to_string();
  EXPECT_EQ(plan_to_json(*back), text);
  EXPECT_TRUE(validate_plan(*back, 2)) << validate_plan(*back, 2).error().to_string();
  EXPECT_EQ(back->live_sub_ops().size(), plan.live_sub_ops().size());
  EXPECT_EQ(plan_to_text(*back), plan_to_text(*back));
}

// The writer quotes plain names itself and hands the rest to the JSON library, and writes the sub-ops in two
// halves (one per core): every live sub-op is one entry, in id order, its name as given whatever it holds.
TEST(PlanJson, WritesEveryNameAsTheJsonLibraryReadsIt) {
  const ir::Graph& graph = testing::graph();
  Plan plan = split_plan(graph);
  const std::vector<std::string> odd = {"quote \" and backslash \\", "tab\there", "caf\xc3\xa9", "plain[0/2]", ""};
  std::vector<std::string> names;
  std::size_t k = 0;
  for (SubOp& s : plan.sub_ops)
    if (s.live) {
      s.name = odd[k % odd.size()] + std::to_string(k);
      ++k;
      names.push_back(s.name);
    }
  const std::string text = plan_to_json(plan);
  const nlohmann::json doc = nlohmann::json::parse(text);
  ASSERT_EQ(doc["sub_ops"].size(), names.size());
  for (std::size_t i = 0; i < names.size(); ++i) {
    EXPECT_EQ(doc["sub_ops"][i]["id"].get<int>(), static_cast<int>(i));
    EXPECT_EQ(doc["sub_ops"][i]["name"].get<std::string>(), names[i]);
  }
  // A plan whose first half of sub-ops is all dead (each op's whole part replaced by its parts): the second
  // half's first entry opens the list.
  const std::string split = plan_to_json(split_plan(graph));
  EXPECT_NE(split.find("\"sub_ops\": [\n  {\"id\": 0,"), std::string::npos) << split.substr(0, 200);
  EXPECT_EQ(nlohmann::json::parse(split)["sub_ops"].size(), split_plan(graph).live_sub_ops().size());
}

TEST(PlanJson, KeepsRecomputationAndResidence) {
  const ir::Graph& graph = testing::graph();
  Plan plan = split_plan(graph);
  for (const ir::Op& op : graph.ops) {
    if (op.name == "act") {
      ASSERT_TRUE(recompute(plan, plan.parts[op.id.index()]));
    }
    if (op.name == "fc2") {  // nested (a coshard part's mark), then marked plainly: stays nested
      ASSERT_TRUE(recompute(plan, plan.parts[op.id.index()], /*nested=*/true));
      ASSERT_TRUE(recompute(plan, plan.parts[op.id.index()]));
    }
  }
  const ir::TensorId w1 = graph.parameters.front();
  ASSERT_TRUE(set_residence(plan, w1, Residence::optimizer_shards));
  const std::string text = plan_to_json(plan);
  EXPECT_NE(text.find(R"("recompute": true)"), std::string::npos);
  EXPECT_NE(text.find(R"("residence": {"fc1.weight": "optimizer shards"})"), std::string::npos) << text.substr(text.size() - 200);
  auto back = plan_from_json(text, graph, ops::builtin_ops(), "plan.json");
  ASSERT_TRUE(back) << (back ? "" : back.error().to_string());
  EXPECT_EQ(plan_to_json(*back), text);
  EXPECT_EQ(residence_of(*back, w1), Residence::optimizer_shards);
  for (const ir::Op& op : graph.ops)
    for (SubOpId part : back->parts[op.id.index()]) {
      EXPECT_EQ(is_recomputed(*back, part), op.name == "act" || op.name == "fc2") << op.name;
      EXPECT_EQ(is_nested_recompute(*back, part), op.name == "fc2") << op.name;
    }
}

TEST(PlanJson, RejectsMalformedInputNamingTheField) {
  const ir::Graph& graph = testing::graph();
  const std::string good = plan_to_json(split_plan(graph));
  const auto error_of = [&](const std::string& text) {
    auto r = plan_from_json(text, graph, ops::builtin_ops(), "p.json");
    return r ? std::string("accepted") : r.error().to_string();
  };
  EXPECT_NE(error_of("{").find("p.json: line 1 column 2: malformed JSON: syntax error"), std::string::npos);
  EXPECT_NE(error_of(R"({"format": "other"})").find("not a Loom plan"), std::string::npos);
  EXPECT_NE(error_of(R"({"format": "loom-plan", "version": 7})").find("version 7"), std::string::npos);
  std::string wrong_op = good;
  wrong_op.replace(wrong_op.find(R"("op": ")") + 7, 0, "nosuch");
  EXPECT_NE(error_of(wrong_op).find("which the graph lacks"), std::string::npos) << error_of(wrong_op);
  std::string bad_box = good;
  bad_box.replace(bad_box.find(R"("box": [[0, )"), 12, R"("box": [[-3, )");
  EXPECT_NE(error_of(bad_box).find("range"), std::string::npos) << error_of(bad_box);
}

// Found by hand with fuzz/plan_fuzz.cc's UBSan build: json's value<int>() converted 1e300 or 5e9 to int, which
// is undefined behaviour; a number that is not a whole int is now an error naming the sub-op and the field.
TEST(PlanJson, ANumberThatIsNotAWholeIntIsAnErrorNamingTheField) {
  const ir::Graph& graph = testing::graph();
  const std::string good = plan_to_json(split_plan(graph));
  const auto error_of = [&](std::string_view field, std::string_view value) {
    std::string text = good;
    const std::size_t at = text.find(fmt::format("\"{}\": ", field));
    const std::size_t start = at + field.size() + 4, stop = text.find_first_of(",}", start);
    text.replace(start, stop - start, value);
    auto r = plan_from_json(text, graph, ops::builtin_ops(), "p.json");
    return r ? std::string("accepted") : r.error().message;
  };
  EXPECT_EQ(error_of("device", "1e300"), "p.json: sub-op 0: \"device\" is 1e+300, not a whole number of int size");
  EXPECT_EQ(error_of("device", "5000000000"), "p.json: sub-op 0: \"device\" is 5000000000, not a whole number of int size");
  EXPECT_EQ(error_of("backward", "2.5"), "p.json: sub-op 0: \"backward\" is 2.5, not a whole number of int size");
  EXPECT_EQ(error_of("id", "\"0\""), "p.json: sub-op 0: \"id\" is \"0\", not a whole number of int size");
  EXPECT_EQ(error_of("ops", "-1e300"), "p.json: graph: \"ops\" is -1e+300, not a whole number of int size");
  EXPECT_EQ(error_of("version", "18446744073709551615"),
            "p.json: \"version\" is 18446744073709551615, not a whole number of int size");
}

}  // namespace
}  // namespace loom::plan
