// balanced_partition and balanced_layer_stages (policy/stages.h): the largest group is the smallest any
// contiguous partition gives (against brute force), ties go to the smallest earlier groups.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <map>
#include <random>
#include <set>

#include "loom/models/zoo.h"
#include "loom/policy/policy.h"
#include "loom/policy/stages.h"
#include "policy_test_support.h"

namespace loom::policy {
namespace {

// Every composition of n items into `parts` non-empty groups, in lexicographic order of the sizes.
void compositions(int n, int parts, std::vector<int>& prefix, std::vector<std::vector<int>>& out) {
  if (parts == 1) {
    prefix.push_back(n);
    out.push_back(prefix);
    prefix.pop_back();
    return;
  }
  for (int first = 1; first <= n - parts + 1; ++first) {
    prefix.push_back(first);
    compositions(n - first, parts - 1, prefix, out);
    prefix.pop_back();
  }
}

double largest(const std::vector<double>& costs, const std::vector<int>& sizes) {
  double worst = 0;
  std::size_t at = 0;
  for (const int size : sizes) {
    double sum = 0;
    for (int i = 0; i < size; ++i) sum += costs[at++];
    worst = std::max(worst, sum);
  }
  return worst;
}

// Integer costs (exact sums): the optimum and the tie-break both equal brute force's.
TEST(BalancedPartition, MatchesBruteForceOnRandomCosts) {
  std::mt19937 rng(20261126);
  for (int trial = 0; trial < 400; ++trial) {
    const int n = std::uniform_int_distribution<int>(1, 9)(rng);
    const int parts = std::uniform_int_distribution<int>(1, n)(rng);
    const int spread = std::uniform_int_distribution<int>(0, 20)(rng);
    std::vector<double> costs(static_cast<std::size_t>(n));
    for (double& c : costs) c = std::uniform_int_distribution<int>(0, spread)(rng);
    SCOPED_TRACE(::testing::Message() << "trial " << trial << " n " << n << " parts " << parts);
    auto sizes = balanced_partition(costs, parts);
    ASSERT_TRUE(sizes) << sizes.error().to_string();
    std::vector<std::vector<int>> all;
    std::vector<int> prefix;
    compositions(n, parts, prefix, all);
    double best = std::numeric_limits<double>::infinity();
    for (const auto& c : all) best = std::min(best, largest(costs, c));
    const auto first_best = std::ranges::find_if(all, [&](const auto& c) { return largest(costs, c) == best; });
    ASSERT_EQ(static_cast<int>(sizes->size()), parts);
    EXPECT_EQ(std::accumulate(sizes->begin(), sizes->end(), 0), n);
    EXPECT_EQ(largest(costs, *sizes), best);
    EXPECT_EQ(*sizes, *first_best);
  }
}

// Real-valued costs: the largest group equals brute force's optimum to rounding.
TEST(BalancedPartition, OptimalOnRandomRealCosts) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    const int n = std::uniform_int_distribution<int>(1, 10)(rng);
    const int parts = std::uniform_int_distribution<int>(1, n)(rng);
    std::vector<double> costs(static_cast<std::size_t>(n));
    for (double& c : costs) c = std::exponential_distribution<double>(1.0)(rng);
    auto sizes = balanced_partition(costs, parts);
    ASSERT_TRUE(sizes);
    std::vector<std::vector<int>> all;
    std::vector<int> prefix;
    compositions(n, parts, prefix, all);
    double best = std::numeric_limits<double>::infinity();
    for (const auto& c : all) best = std::min(best, largest(costs, c));
    EXPECT_LE(largest(costs, *sizes), best * (1 + 1e-9)) << "trial " << trial;
  }
}

TEST(BalancedPartition, EqualCostsGiveEqualCounts) {
  for (const int parts : {1, 2, 3, 4, 6, 8})
    for (const int per : {1, 2, 5}) {
      const std::vector<double> costs(static_cast<std::size_t>(parts * per), 0.37);
      auto sizes = balanced_partition(costs, parts);
      ASSERT_TRUE(sizes);
      EXPECT_EQ(*sizes, std::vector<int>(static_cast<std::size_t>(parts), per));
    }
}

TEST(BalancedPartition, Errors) {
  const std::vector<double> three{1, 2, 3};
  EXPECT_FALSE(balanced_partition(three, 0));
  auto four = balanced_partition(three, 4);
  ASSERT_FALSE(four);
  EXPECT_NE(four.error().message.find("3 items cannot be cut into 4"), std::string::npos) << four.error().message;
}

// A GPT's layers are identical: megatron_stages keeps Megatron-LM's equal counts, by FLOPs as by any
// uniform cost, and the balanced cut of the layers' own costs agrees.
TEST(MegatronStages, IdenticalLayersKeepEqualCounts) {
  auto forward = models::build_model("gpt3-125m", {.dtype = ir::DType::f32, .layers = 8, .shrink = true});
  ASSERT_TRUE(forward) << forward.error().to_string();
  auto graph = ir::build_training_graph(*forward, ops::builtin_ops(), {});
  ASSERT_TRUE(graph) << graph.error().to_string();
  auto plan = plan::make_plan(*graph, ops::builtin_ops());
  ASSERT_TRUE(plan);
  for (const int pp : {2, 4, 8}) {
    auto equal = layer_stages(*plan, pp);
    ASSERT_TRUE(equal);
    auto stages = megatron_stages(*plan, {.pp = pp});
    ASSERT_TRUE(stages) << stages.error().to_string();
    EXPECT_EQ(*stages, *equal) << "pp " << pp;
  }
  // 8 layers do not divide into 3 stages: whole layers still, never a layer cut across two stages.
  auto three = megatron_stages(*plan, {.pp = 3});
  ASSERT_TRUE(three) << three.error().to_string();
  const std::vector<int> ordinal = layer_ordinals(*graph);
  std::map<int, std::set<int>> stages_of_layer;
  for (const ir::Op& op : graph->ops)
    if (ordinal[op.id.index()] >= 0) stages_of_layer[ordinal[op.id.index()]].insert((*three)[op.id.index()]);
  EXPECT_EQ(stages_of_layer.size(), 8u);
  for (const auto& [layer, in] : stages_of_layer) EXPECT_EQ(in.size(), 1u) << "layer " << layer;
}

// Swin's layers differ: by training FLOPs alone (no job to price them), the cut is still whole layers
// whose costliest stage costs least.
TEST(BalancedLayerStages, SwinStagesAreOptimalOverWholeLayers) {
  const ir::Graph& graph = testing::shrunk("swin-1.8b").graph;
  auto plan = plan::make_plan(graph, ops::builtin_ops());
  ASSERT_TRUE(plan);
  auto flops = training_flops(graph, ops::builtin_ops());
  ASSERT_TRUE(flops);
  EXPECT_FALSE(uniform_layers(graph, *flops));
  const std::vector<double> per_layer = layer_costs(graph, *flops);
  auto stages = balanced_layer_stages(*plan, 2, *flops);
  ASSERT_TRUE(stages) << stages.error().to_string();
  std::vector<double> cost(2, 0.0);
  for (const ir::Op& op : graph.ops)
    if (const int s = (*stages)[op.id.index()]; s >= 0) cost[static_cast<std::size_t>(s)] += (*flops)[op.id.index()];
  double best = std::numeric_limits<double>::infinity();
  double before = 0;
  const double total = std::accumulate(per_layer.begin(), per_layer.end(), 0.0);
  for (std::size_t cut = 1; cut < per_layer.size(); ++cut) {
    before += per_layer[cut - 1];
    best = std::min(best, std::max(before, total - before));
  }
  EXPECT_NEAR(std::max(cost[0], cost[1]), best, best * 1e-9);
  auto too_many = balanced_layer_stages(*plan, static_cast<int>(per_layer.size()) + 1, *flops);
  ASSERT_FALSE(too_many);
  EXPECT_NE(too_many.error().message.find("cannot fill"), std::string::npos) << too_many.error().message;
}

}  // namespace
}  // namespace loom::policy
