// apply_choice / apply_sharding: any choice of the strategy graph is a valid plan that computes what the
// single-device program computes, by the plan interpreter (many random choices) and through the job
// pipeline's materialization and the ExecPlan interpreter (a few).
#include <gtest/gtest.h>

#include <cstdio>
#include <random>

#include "loom/api/verify_job.h"
#include "loom/plan/validate.h"
#include "loom/verify/graph_interpreter.h"
#include "loom/verify/plan_interpreter.h"
#include "strategy_test_support.h"
#include "testing/policy_plans.h"
#include "testing/tied_gpt.h"

namespace loom::search {
namespace {

struct Case {
  std::string name;
  ir::Graph graph;
};

// Small float32 graphs the reference interpreter runs: an MLP, a GPT with its head tied to the embedding
// (a parameter read by two ops), and the zoo's shrunk GPT-3 (dropout, vocabulary-parallel loss parts).
const std::vector<Case>& cases() {
  static const std::vector<Case> all = {
      {"mlp", testing::mlp_graph(8, 8, 16, 8, ir::DType::f32)},
      {"tied-gpt", policy::testing::tied_gpt(true)},
      {"gpt3-125m shrunk", exec::testing::shrunk_training_graph("gpt3-125m", ir::DType::f32)},
  };
  return all;
}

ShardingChoice random_choice(const StrategyGraph& sg, std::mt19937_64& rng) {
  ShardingChoice choice;
  for (const StrategyNode& node : sg.nodes)
    choice.strategies.push_back(
        std::uniform_int_distribution<int>(0, static_cast<int>(node.strategies.size()) - 1)(rng));
  return choice;
}

std::string describe(const StrategyGraph& sg, const ShardingChoice& choice) {
  std::string text;
  for (std::size_t g = 0; g < sg.nodes.size(); ++g)
    text += fmt::format("  {}: {}\n", sg.nodes[g].name,
                        to_string(sg.nodes[g].strategies[static_cast<std::size_t>(choice.strategies[g])]));
  return text;
}

TEST(ApplyChoice, RandomChoicesMatchTheSingleDeviceRun) {
  constexpr int kChoices = 12;
  int checked = 0;
  for (const Case& c : cases()) {
    const std::vector<verify::NdArray> initial = verify::initial_values(c.graph, 7);
    auto reference = verify::run_graph(c.graph, initial);
    ASSERT_TRUE(reference) << reference.error().to_string();
    for (const DeviceMesh& mesh : {DeviceMesh{{2}}, DeviceMesh{{4}}, DeviceMesh{{2, 2}}}) {
      SCOPED_TRACE(fmt::format("{} on mesh {}", c.name, to_string(mesh)));
      auto sg = testing::strategy_graph(c.graph, mesh);
      ASSERT_TRUE(sg) << sg.error().to_string();
      std::mt19937_64 rng(std::hash<std::string>{}(c.name) + static_cast<std::uint64_t>(mesh.size() * 10 + mesh.axes.size()));
      for (int k = 0; k < kChoices; ++k) {
        const ShardingChoice choice = random_choice(*sg, rng);
        auto plan = apply_choice(*sg, choice, c.graph, ops::builtin_ops());
        ASSERT_TRUE(plan) << plan.error().to_string() << "\n" << describe(*sg, choice);
        auto valid = plan::validate_plan(*plan, mesh.size());
        ASSERT_TRUE(valid) << valid.error().to_string() << "\n" << describe(*sg, choice);
        auto run = verify::run_plan(*plan, mesh.size(), initial);
        ASSERT_TRUE(run) << run.error().to_string() << "\n" << describe(*sg, choice);
        auto compared = verify::compare_runs(c.graph, *reference, run->values);
        ASSERT_TRUE(compared) << compared.error().to_string();
        EXPECT_LT(compared->overall.max_rel, 1e-9) << compared->overall.worst << "\n" << describe(*sg, choice);
        ++checked;
      }
    }
  }
  std::printf("%d random choices applied, validated and interpreted\n", checked);
}

// Every device gets work: part k of every forward op is on device k.
TEST(ApplyChoice, PartKOfEveryForwardOpIsOnDeviceK) {
  const Case& c = cases()[1];
  auto sg = testing::strategy_graph(c.graph, {{2, 2}});
  ASSERT_TRUE(sg) << sg.error().to_string();
  std::mt19937_64 rng(3);
  auto plan = apply_choice(*sg, random_choice(*sg, rng), c.graph, ops::builtin_ops());
  ASSERT_TRUE(plan) << plan.error().to_string();
  for (const ir::Op& op : c.graph.ops) {
    if (op.pass != ir::Pass::forward) continue;
    const auto& parts = plan->parts[op.id.index()];
    ASSERT_EQ(parts.size(), 4u) << op.name;
    for (std::size_t k = 0; k < parts.size(); ++k) EXPECT_EQ(plan->sub_op(parts[k]).device, static_cast<int>(k));
  }
}

// Through the job pipeline: materialized with the layout search, checked, passed, and run by the ExecPlan
// interpreter, for the data-parallel choice, the all-replicated one and random ones.
TEST(ApplyChoice, MaterializedPlansVerifyThroughTheJob) {
  const Case& c = cases()[2];
  for (const DeviceMesh& mesh : {DeviceMesh{{4}}, DeviceMesh{{2, 2}}}) {
    SCOPED_TRACE(to_string(mesh));
    auto sg = testing::strategy_graph(c.graph, mesh);
    ASSERT_TRUE(sg) << sg.error().to_string();
    std::mt19937_64 rng(11);
    std::vector<ShardingChoice> choices{ShardingChoice{std::vector<int>(sg->nodes.size(), 0)}};
    ShardingChoice all_replicated;
    for (const StrategyNode& node : sg->nodes)
      all_replicated.strategies.push_back(static_cast<int>(node.strategies.size()) - 1);
    choices.push_back(all_replicated);
    for (int k = 0; k < 3; ++k) choices.push_back(random_choice(*sg, rng));
    for (const ShardingChoice& choice : choices) {
      const auto job = testing::sharded_job(
          c.graph, mesh.size(),
          [&](const ir::Graph& g, const ir::OpCatalog& catalog) { return apply_choice(*sg, choice, g, catalog); },
          /*shrink=*/true, /*simulate=*/false);
      ASSERT_NE(job, nullptr) << describe(*sg, choice);
      auto report = api::verify_job(*job, 5);
      ASSERT_TRUE(report) << report.error().to_string() << "\n" << describe(*sg, choice);
      EXPECT_LT(report->worst(), 1e-9) << report->comparison.overall.worst << "\n" << describe(*sg, choice);
    }
  }
}

TEST(ApplySharding, RefusesBadInput) {
  const ir::Graph& graph = cases()[0].graph;
  const DeviceMesh mesh{{2}};
  std::vector<OpStrategy> strategies(graph.ops.size(), replicated(mesh));
  EXPECT_TRUE(apply_sharding(graph, ops::builtin_ops(), mesh, strategies));
  auto short_list = apply_sharding(graph, ops::builtin_ops(), mesh, std::span(strategies).first(2));
  ASSERT_FALSE(short_list);
  EXPECT_NE(short_list.error().message.find("2 op strategies"), std::string::npos);
  strategies[0] = OpStrategy{{"nope"}};
  auto unknown = apply_sharding(graph, ops::builtin_ops(), mesh, strategies);
  ASSERT_FALSE(unknown);
  EXPECT_NE(unknown.error().message.find("fc1"), std::string::npos) << unknown.error().message;
  strategies[0] = OpStrategy{{"o"}};
  EXPECT_FALSE(apply_sharding(graph, ops::builtin_ops(), DeviceMesh{{3}}, strategies));  // 16 rows over 3
}

}  // namespace
}  // namespace loom::search
