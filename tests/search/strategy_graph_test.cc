// build_strategy_graph: strategies, costs and coarsening of a stage's ops on a device mesh, and the
// exhaustive optimum of the problem it builds against the hand-written layouts it should rediscover.
#include <gtest/gtest.h>

#include <cstdio>
#include <random>

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

namespace loom::search {
namespace {

const StrategyGraphOptions kUncoarsened{.merge_layers = false, .follow_chains = false};

TEST(CoarsenStrategyGraph, MergesIdenticalLayersAndFollowsChains) {
  const ir::Graph graph = gpt_layer(8, 128, 256, 4, /*layers=*/4);
  auto full = strategy_graph(graph, {{4}}, kUncoarsened);
  auto layers = strategy_graph(graph, {{4}}, {.follow_chains = false});
  auto coarse = strategy_graph(graph, {{4}});
  ASSERT_TRUE(full && layers && coarse);
  const int per_layer = 17;  // ln1, qkv (+ view, split, 3 transposes), sdpa, merge (2), out, residual, ln2, fc1, act, fc2, residual
  EXPECT_EQ(full->stats.forward_ops, 4 * per_layer + 6);
  EXPECT_EQ(full->stats.nodes, full->stats.forward_ops);
  EXPECT_EQ(layers->stats.nodes, per_layer + 6);
  EXPECT_EQ(coarse->stats.after_layers, per_layer + 6);
  EXPECT_LT(coarse->stats.nodes, coarse->stats.after_layers);
  std::printf("gpt 4 layers on 4: %d forward ops -> %d after merging layers -> %d nodes after chains; edges %d -> %d\n",
              coarse->stats.forward_ops, coarse->stats.after_layers, coarse->stats.nodes, full->stats.edges,
              coarse->stats.edges);
  // The merged node of layer 0's fc1 holds every layer's fc1 and activation.
  const int fc1 = coarse->node_of_op[op_named(graph, "layers.0.mlp.fc1").id.index()];
  EXPECT_EQ(coarse->node_of_op[op_named(graph, "layers.3.mlp.fc1").id.index()], fc1);
  EXPECT_EQ(coarse->node_of_op[op_named(graph, "layers.2.mlp.act").id.index()], fc1);
  EXPECT_EQ(coarse->nodes[static_cast<std::size_t>(fc1)].ops.size(), 8u);
}

// A choice of the coarsened problem costs what its expansion costs in the problem without coarsening: the
// merged nodes add the same op and op-pair costs, only rounded to nanoseconds per node instead of per op.
TEST(CoarsenStrategyGraph, PricesAChoiceAsTheFullProblemPricesItsExpansion) {
  const ir::Graph graph = gpt_layer(8, 128, 256, 4, /*layers=*/3);
  for (const DeviceMesh& mesh : {DeviceMesh{{4}}, DeviceMesh{{2, 2}}}) {
    auto full = strategy_graph(graph, mesh, kUncoarsened);
    auto coarse = strategy_graph(graph, mesh);
    ASSERT_TRUE(full && coarse);
    std::mt19937_64 rng(5);
    for (int k = 0; k < 50; ++k) {
      ShardingChoice choice;
      for (const StrategyNode& node : coarse->nodes)
        choice.strategies.push_back(
            std::uniform_int_distribution<int>(0, static_cast<int>(node.strategies.size()) - 1)(rng));
      auto per_op = op_strategies(*coarse, choice);
      ASSERT_TRUE(per_op);
      auto expanded = choice_of(*full, *per_op);
      ASSERT_TRUE(expanded) << expanded.error().to_string();
      auto a = evaluate_choice(coarse->problem, choice);
      auto b = evaluate_choice(full->problem, *expanded);
      ASSERT_TRUE(a && b);
      EXPECT_NEAR(static_cast<double>(a->total), static_cast<double>(b->total),
                  static_cast<double>(full->problem.nodes.size() + full->problem.edges.size()));
      EXPECT_EQ(a->peak_usage, b->peak_usage);
    }
  }
}

// Coarsening restricts the space (identical layers choose alike, chains follow greedily): its optimum is
// never below the full problem's, and on these layers no more than 2 % above it.
TEST(CoarsenStrategyGraph, OptimumWithinTwoPercentOfTheFullProblems) {
  for (const auto& [name, graph] : {std::pair{"wide", gpt_layer(4, 256, 2048, 16, 2)},
                                    std::pair{"batch", gpt_layer(64, 512, 128, 4, 2)},
                                    std::pair{"balanced", gpt_layer(16, 512, 1024, 16, 2)}}) {
    auto full = strategy_graph(graph, {{4}}, kUncoarsened);
    auto coarse = strategy_graph(graph, {{4}});
    ASSERT_TRUE(full && coarse);
    const testing::Optimum exact = exact_optimum(full->problem);
    const testing::Optimum coarsened = exact_optimum(coarse->problem);
    EXPECT_GE(coarsened.cost + static_cast<std::int64_t>(full->problem.nodes.size()), exact.cost) << name;
    EXPECT_LE(static_cast<double>(coarsened.cost), 1.02 * static_cast<double>(exact.cost)) << name;
    std::printf("%s: full problem %d nodes, optimum %.4f ms (widest frontier %zu states); coarsened %d nodes, "
                "optimum %.4f ms (%+.3f %%)\n",
                name, full->stats.nodes, exact.cost / 1e6, exact.widest, coarse->stats.nodes, coarsened.cost / 1e6,
                100.0 * (static_cast<double>(coarsened.cost) / static_cast<double>(exact.cost) - 1));
  }
}

}  // namespace
}  // namespace loom::search

namespace loom::search {
namespace {

// A 2-D mesh a x b holds the 1-D mesh of a*b devices: splitting x on both axes is splitting x a*b ways
// (part (i, j) is chunk i*b + j on device i*b + j), replicating on both is replicating. So its optimum is
// never worse, and can be better (e.g. batch on one axis, heads on the other).
TEST(BuildStrategyGraph, TwoDimensionalMeshIsNoWorseThanOneDimensional) {
  for (const auto& [name, graph] : {std::pair{"wide", gpt_layer(4, 256, 2048, 16)},
                                    std::pair{"batch", gpt_layer(64, 512, 128, 4)},
                                    std::pair{"balanced", gpt_layer(16, 512, 1024, 16)}}) {
    auto line = strategy_graph(graph, {{4}});
    auto grid = strategy_graph(graph, {{2, 2}});
    ASSERT_TRUE(line && grid);
    // Pairs of the 1-D strategies, less those trans refuses (a size 2 x 2 does not divide, or a merged one).
    EXPECT_LE(grid->nodes.front().strategies.size(),
              line->nodes.front().strategies.size() * line->nodes.front().strategies.size());
    EXPECT_GT(grid->nodes.front().strategies.size(), line->nodes.front().strategies.size());
    const testing::Optimum one = exact_optimum(line->problem), two = exact_optimum(grid->problem);
    EXPECT_LE(two.cost, one.cost + static_cast<std::int64_t>(grid->problem.nodes.size())) << name;
    auto per_op = op_strategies(*grid, two.choice);
    ASSERT_TRUE(per_op);
    std::printf("%s: optimum on 4 %.4f ms, on 2x2 %.4f ms (fc1 %s)\n", name, one.cost / 1e6, two.cost / 1e6,
                to_string((*per_op)[op_named(graph, "layers.0.mlp.fc1").id.index()]).c_str());
  }
}

// The same input gives the same problem, cost for cost.
TEST(BuildStrategyGraph, IsDeterministic) {
  const ir::Graph graph = gpt_layer(8, 128, 256, 4, 2);
  auto a = strategy_graph(graph, {{2, 2}});
  auto b = strategy_graph(graph, {{2, 2}});
  ASSERT_TRUE(a && b);
  ASSERT_EQ(a->problem.nodes.size(), b->problem.nodes.size());
  for (std::size_t i = 0; i < a->problem.nodes.size(); ++i) {
    EXPECT_EQ(a->problem.nodes[i].name, b->problem.nodes[i].name);
    EXPECT_EQ(a->problem.nodes[i].costs, b->problem.nodes[i].costs);
    EXPECT_EQ(a->problem.nodes[i].usages, b->problem.nodes[i].usages);
    EXPECT_EQ(a->problem.nodes[i].start, b->problem.nodes[i].start);
  }
  ASSERT_EQ(a->problem.edges.size(), b->problem.edges.size());
  for (std::size_t e = 0; e < a->problem.edges.size(); ++e) EXPECT_EQ(a->problem.edges[e].costs, b->problem.edges[e].costs);
}

}  // namespace
}  // namespace loom::search

namespace loom::search {
namespace {

// Usage per device: splitting the weights of a wide layer holds a quarter of their state, replicating
// them (data parallelism) all of it, so a limit between the two peaks admits tensor parallelism alone.
TEST(BuildStrategyGraph, UsageLimitSeparatesShardedFromReplicatedWeights) {
  const ir::Graph graph = gpt_layer(4, 256, 2048, 16);
  auto sg = strategy_graph(graph, {{4}});
  ASSERT_TRUE(sg);
  auto plan = plan::make_plan(graph, ops::builtin_ops());
  ASSERT_TRUE(plan);
  const auto batch = plan::batch_identifiers(*plan);
  std::vector<OpStrategy> dp(graph.ops.size(), replicated({{4}}));
  for (const ir::Op& op : graph.ops)
    if (op.pass == ir::Pass::forward && batch[op.id.index()]) dp[op.id.index()] = split(*batch[op.id.index()]);
  auto dp_choice = choice_of(*sg, dp);
  auto tp_choice = choice_of(*sg, megatron_strategies(graph, 4));
  ASSERT_TRUE(dp_choice && tp_choice);
  auto dp_cost = evaluate_choice(sg->problem, *dp_choice);
  auto tp_cost = evaluate_choice(sg->problem, *tp_choice);
  ASSERT_TRUE(dp_cost && tp_cost);
  // 12 h^2 weights at 16 bytes of state each (bf16 weight and gradient, fp32 master and two moments).
  const std::int64_t layer_state = 12 * 2048 * 2048 * 16;
  EXPECT_GT(dp_cost->peak_usage - tp_cost->peak_usage, layer_state / 2);
  sg->problem.usage_limit = (dp_cost->peak_usage + tp_cost->peak_usage) / 2;
  EXPECT_FALSE(evaluate_choice(sg->problem, *dp_choice));
  EXPECT_TRUE(evaluate_choice(sg->problem, *tp_choice));
}

}  // namespace
}  // namespace loom::search
