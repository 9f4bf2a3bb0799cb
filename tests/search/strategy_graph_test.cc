// build_strategy_graph: strategies, costs and coarsening of a stage's ops on a device mesh, and the
// exhaustive optimum of the problem it builds against the hand-written layouts it should rediscover.
#include <gtest/gtest.h>

#include <cstdio>

#include "loom/plan/batch.h"
#include "loom/policy/tensor_parallel.h"
#include "strategy_test_support.h"
#include "testing/tied_gpt.h"

namespace loom::search {
namespace {

using testing::exact_optimum;
using testing::strategy_graph;

OpStrategy split(std::string x) { return OpStrategy{{std::move(x)}}; }

const ir::Op& op_named(const ir::Graph& graph, std::string_view name) {
  for (const ir::Op& op : graph.ops)
    if (op.name == name) return op;
  ADD_FAILURE() << "no op " << name;
  return graph.ops.front();
}

// One GPT layer (untied head, cross entropy) at bf16.
ir::Graph gpt_layer(std::int64_t batch, std::int64_t seq, std::int64_t hidden, std::int64_t heads, int layers = 1) {
  return policy::testing::tied_gpt(false, {.layers = layers, .hidden = hidden, .heads = heads, .vocab = 512,
                                           .seq = seq, .batch = batch, .dtype = ir::DType::bf16});
}

TEST(BuildStrategyGraph, MlpStrategiesCostsAndChains) {
  const ir::Graph graph = testing::mlp_graph(64, 256, 1024, 256, ir::DType::bf16);
  auto sg = strategy_graph(graph, {{4}});
  ASSERT_TRUE(sg) << sg.error().to_string();
  // fc1, act, fc2, loss; gelu follows fc1.
  EXPECT_EQ(sg->stats.forward_ops, 4);
  EXPECT_EQ(sg->stats.nodes, 3);
  ASSERT_EQ(sg->nodes.size(), 3u);
  EXPECT_EQ(sg->nodes[0].name, "fc1");
  EXPECT_EQ(sg->nodes[0].ops.size(), 2u);
  EXPECT_EQ(sg->nodes[0].strategies,
            (std::vector<OpStrategy>{split("*0"), split("i"), split("o"), replicated({{4}})}));
  // The gelu takes fc1's layout where it can: column-split fc1 -> split gelu; row-split (partial sums) -> a
  // gelu needs whole values, the cheapest being its batch split after a reduce-scatter.
  const ir::OpId act = op_named(graph, "act").id;
  EXPECT_EQ(sg->op_strategies[act.index()][2], split("*1"));
  EXPECT_EQ(sg->op_strategies[act.index()][0], split("*0"));
  for (const ShardingNode& node : sg->problem.nodes)
    for (std::size_t s = 0; s < node.costs.size(); ++s) {
      EXPECT_GT(node.costs[s], 0) << node.name;
      EXPECT_GT(node.usages[s], 0) << node.name;
    }
  // Replicating fc1 costs 4x the compute of splitting it and holds 4x its parameters' state.
  const ShardingNode& fc1 = sg->problem.nodes[0];
  EXPECT_GT(fc1.usages[3], fc1.usages[2]);
  EXPECT_GT(fc1.costs[3], fc1.costs[2]);
  for (const ShardingEdge& e : sg->problem.edges)
    for (std::int64_t c : e.costs) EXPECT_GE(c, 0);
}

TEST(BuildStrategyGraph, RefusesAMeshLargerThanTheCluster) {
  const ir::Graph graph = testing::mlp_graph(64, 256, 1024, 256, ir::DType::bf16);
  auto sg = strategy_graph(graph, {{16}});
  ASSERT_FALSE(sg);
  EXPECT_NE(sg.error().message.find("16 devices"), std::string::npos) << sg.error().message;
  EXPECT_FALSE(strategy_graph(graph, {{2, 2, 2}}));
  EXPECT_FALSE(strategy_graph(graph, {{0}}));
}

// The optimum a problem's exhaustive search finds, as op strategies.
std::vector<OpStrategy> optimum_strategies(const StrategyGraph& sg) {
  const testing::Optimum best = exact_optimum(sg.problem);
  auto strategies = op_strategies(sg, best.choice);
  EXPECT_TRUE(strategies) << strategies.error().to_string();
  return strategies.value_or(std::vector<OpStrategy>{});
}

// Megatron's layout (policy/tensor_parallel.h) as op strategies: its split, else replication.
std::vector<OpStrategy> megatron_strategies(const ir::Graph& graph, int tp) {
  auto plan = plan::make_plan(graph, ops::builtin_ops());
  EXPECT_TRUE(plan);
  auto layout = policy::tensor_parallel_layout(*plan, tp);
  EXPECT_TRUE(layout) << layout.error().to_string();
  std::vector<OpStrategy> out(graph.ops.size(), replicated({{tp}}));
  for (const ir::Op& op : graph.ops)
    if (op.pass == ir::Pass::forward && layout->splits[op.id.index()])
      out[op.id.index()] = split(layout->splits[op.id.index()]->identifier);
  return out;
}

TEST(BuildStrategyGraph, OptimumIsMegatronsTensorParallelismWhenTheHiddenSizeDominates) {
  // Weights of 12 h^2 per layer against activations of b s h: splitting the weights wins.
  const ir::Graph graph = gpt_layer(4, 256, 2048, 16);
  auto sg = strategy_graph(graph, {{4}});
  ASSERT_TRUE(sg) << sg.error().to_string();
  const std::vector<OpStrategy> best = optimum_strategies(*sg);
  const std::vector<OpStrategy> megatron = megatron_strategies(graph, 4);
  int linears = 0;
  for (const ir::Op& op : graph.ops) {
    if (op.pass != ir::Pass::forward || op.type != "linear" || !op.name.starts_with("layers.")) continue;
    ++linears;
    EXPECT_EQ(best[op.id.index()], megatron[op.id.index()])
        << op.name << ": " << to_string(best[op.id.index()]) << " vs Megatron's " << to_string(megatron[op.id.index()]);
  }
  EXPECT_EQ(linears, 4);
  // And no worse than Megatron's whole layout, which the problem prices too.
  auto megatron_choice = choice_of(*sg, megatron);
  ASSERT_TRUE(megatron_choice) << megatron_choice.error().to_string();
  auto megatron_cost = evaluate_choice(sg->problem, *megatron_choice);
  ASSERT_TRUE(megatron_cost) << megatron_cost.error().to_string();
  const std::int64_t optimum = exact_optimum(sg->problem).cost;
  EXPECT_LE(optimum, megatron_cost->total);
  std::printf("gpt layer h2048 b4 s256 on 4: optimum %.3f ms, Megatron tp %.3f ms\n", optimum / 1e6,
              megatron_cost->total / 1e6);
}

TEST(BuildStrategyGraph, OptimumIsDataParallelismWhenTheBatchDominates) {
  const ir::Graph graph = gpt_layer(64, 512, 128, 4);
  auto sg = strategy_graph(graph, {{4}});
  ASSERT_TRUE(sg) << sg.error().to_string();
  const std::vector<OpStrategy> best = optimum_strategies(*sg);
  auto plan = plan::make_plan(graph, ops::builtin_ops());
  ASSERT_TRUE(plan);
  const auto batch = plan::batch_identifiers(*plan);
  int batched = 0;
  for (const ir::Op& op : graph.ops) {
    if (op.pass != ir::Pass::forward || !batch[op.id.index()]) continue;
    ++batched;
    EXPECT_EQ(best[op.id.index()], split(*batch[op.id.index()])) << op.name << ": " << to_string(best[op.id.index()]);
  }
  EXPECT_GT(batched, 10);
}

}  // namespace
}  // namespace loom::search
