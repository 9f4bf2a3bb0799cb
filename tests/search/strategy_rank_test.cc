// The strategy graph's predicted cost against the simulator: on a handful of choices (data parallelism,
// Megatron's tensor parallelism, all replicated, the problem's optimum, random ones) the problem's total
// and the simulated step time of the materialized plan rank the choices alike.
#include <gtest/gtest.h>

#include <cstdio>
#include <random>

#include "loom/plan/batch.h"
#include "loom/policy/tensor_parallel.h"
#include "loom/search/rank_correlation.h"
#include "strategy_test_support.h"
#include "testing/tied_gpt.h"

namespace loom::search {
namespace {

struct Ranked {
  std::string label;
  ShardingChoice choice;
};

// The named choices, as op strategies mapped onto the problem's nodes.
std::vector<Ranked> named_choices(const StrategyGraph& sg, const ir::Graph& graph, int n) {
  auto plan = plan::make_plan(graph, ops::builtin_ops());
  EXPECT_TRUE(plan);
  const auto batch = plan::batch_identifiers(*plan);
  auto tp = policy::tensor_parallel_layout(*plan, n);
  EXPECT_TRUE(tp) << tp.error().to_string();
  std::vector<OpStrategy> dp(graph.ops.size(), replicated(sg.mesh)), megatron = dp;
  for (const ir::Op& op : graph.ops) {
    if (op.pass != ir::Pass::forward) continue;
    if (batch[op.id.index()]) dp[op.id.index()] = OpStrategy{{*batch[op.id.index()]}};
    if (tp->splits[op.id.index()]) megatron[op.id.index()] = OpStrategy{{tp->splits[op.id.index()]->identifier}};
  }
  std::vector<Ranked> out;
  for (const auto& [label, per_op] : {std::pair{"data parallel", dp}, std::pair{"megatron tp", megatron}}) {
    auto choice = choice_of(sg, per_op);
    EXPECT_TRUE(choice) << label << ": " << choice.error().to_string();
    if (choice) out.push_back({label, *choice});
  }
  ShardingChoice all_replicated;
  for (const StrategyNode& node : sg.nodes) all_replicated.strategies.push_back(static_cast<int>(node.strategies.size()) - 1);
  out.push_back({"replicated", all_replicated});
  out.push_back({"optimum", testing::exact_optimum(sg.problem).choice});
  return out;
}

TEST(StrategyGraphRanking, PredictedCostRanksChoicesAsTheSimulatorDoes) {
  constexpr int kDevices = 4;
  const ir::Graph graph = policy::testing::tied_gpt(
      false, {.layers = 1, .hidden = 1024, .heads = 16, .vocab = 512, .seq = 512, .batch = 8, .dtype = ir::DType::bf16});
  auto sg = testing::strategy_graph(graph, {{kDevices}});
  ASSERT_TRUE(sg) << sg.error().to_string();
  std::vector<Ranked> choices = named_choices(*sg, graph, kDevices);
  std::mt19937_64 rng(2024);
  for (int k = 0; k < 6; ++k) {
    ShardingChoice choice;
    for (const StrategyNode& node : sg->nodes)
      choice.strategies.push_back(std::uniform_int_distribution<int>(0, static_cast<int>(node.strategies.size()) - 1)(rng));
    choices.push_back({fmt::format("random {}", k), choice});
  }
  std::vector<double> predicted, simulated, predicted_peak, simulated_peak;
  for (const Ranked& r : choices) {
    auto cost = evaluate_choice(sg->problem, r.choice);
    ASSERT_TRUE(cost) << cost.error().to_string();
    const auto job = testing::sharded_job(
        graph, kDevices,
        [&](const ir::Graph& g, const ir::OpCatalog& catalog) { return apply_choice(*sg, r.choice, g, catalog); },
        /*shrink=*/false, /*simulate=*/true);
    ASSERT_NE(job, nullptr) << r.label;
    predicted.push_back(static_cast<double>(cost->total) / 1e6);
    simulated.push_back(job->metrics.step_time * 1e3);
    const auto& peak = job->memory.devices[static_cast<std::size_t>(job->memory.max_device())];
    predicted_peak.push_back(static_cast<double>(cost->peak_usage));
    simulated_peak.push_back(static_cast<double>(peak.peak_bytes));
    // The usage proxy bounds the simulated peak from above (strategy_graph.h, "Usage").
    EXPECT_GE(cost->peak_usage, peak.peak_bytes) << r.label;
    std::printf("  %-14s predicted %8.3f ms  simulated %8.3f ms; peak memory predicted %s, simulated %s\n",
                r.label.c_str(), predicted.back(), simulated.back(),
                cost::format_bytes(static_cast<double>(cost->peak_usage)).c_str(),
                cost::format_bytes(static_cast<double>(peak.peak_bytes)).c_str());
  }
  const double rho = spearman(predicted, simulated);
  std::printf("Spearman rank correlation over %zu choices: step %.3f, peak memory %.3f\n", choices.size(), rho,
              spearman(predicted_peak, simulated_peak));
  EXPECT_GE(rho, 0.8);
  // The optimum is the fastest simulated choice of these, or within 5 % of it.
  const double fastest = *std::min_element(simulated.begin(), simulated.end());
  EXPECT_LE(simulated[3], 1.05 * fastest);
}

}  // namespace
}  // namespace loom::search
