// forward_op_seconds (api/stage_costs.h) and the pipeline stages megatron_stages cuts by them: identical
// layers keep Megatron-LM's equal layer counts, Swin's costlier high-resolution blocks get fewer per stage.
// forward_op_costs: the bytes each forward op holds per micro-batch and of model state.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "loom/api/job.h"
#include "loom/api/resolve_request.h"
#include "loom/api/stage_costs.h"
#include "loom/ir/graph_stats.h"
#include "loom/policy/policy.h"
#include "loom/policy/stages.h"

namespace loom::api {
namespace {

std::unique_ptr<Job> loaded(const JobOptions& options) {
  auto job = load_job(options);
  EXPECT_TRUE(job) << (job ? "" : job.error().to_string());
  return job ? std::move(*job) : nullptr;
}

// The stages megatron_stages gives the job's graph with the job's layer costs.
std::vector<int> priced_stages(const Job& job, std::vector<double>& seconds) {
  auto priced = forward_op_seconds(job, job.request.config);
  EXPECT_TRUE(priced) << (priced ? "" : priced.error().to_string());
  if (!priced) return {};
  seconds = *priced;
  auto plan = plan::make_plan(job.graph, job.catalog);
  EXPECT_TRUE(plan);
  policy::ParallelConfig config = job.request.config;
  config.op_seconds = seconds;
  auto stages = policy::megatron_stages(*plan, config, job.catalog);
  EXPECT_TRUE(stages) << (stages ? "" : stages.error().to_string());
  return stages ? *stages : std::vector<int>{};
}

TEST(ForwardOpSeconds, IdenticalLayersKeepEqualLayerCounts) {
  for (const int pp : {2, 4}) {
    SCOPED_TRACE(pp);
    JobOptions options;
    options.model = "gpt3-125m";
    options.layers = 8;
    options.seq = 256;
    options.global_batch = 8;
    options.recompute = policy::Recompute::full;
    options.fold = Fold::off;
    const auto job = loaded(with_config(options, {.tp = 2, .pp = pp, .micro_batches = 4}));
    ASSERT_NE(job, nullptr);
    std::vector<double> seconds;
    const std::vector<int> stages = priced_stages(*job, seconds);
    // Forward ops carry the time (their backward's and recomputation's folded in), the others none.
    double forward = 0;
    for (const ir::Op& op : job->graph.ops) {
      if (op.pass == ir::Pass::forward) forward += seconds[op.id.index()];
      else EXPECT_EQ(seconds[op.id.index()], 0) << op.name;
    }
    EXPECT_GT(forward, 0);
    EXPECT_TRUE(policy::uniform_layers(job->graph, seconds));
    auto plan = plan::make_plan(job->graph, job->catalog);
    ASSERT_TRUE(plan);
    auto equal = policy::layer_stages(*plan, pp);
    ASSERT_TRUE(equal);
    EXPECT_EQ(stages, *equal);
    // The balanced cut of the layers' own costs is the same cut.
    std::vector<double> inside(seconds.size(), 0.0);
    const std::vector<int> own = policy::layer_ordinals(job->graph);
    for (std::size_t i = 0; i < seconds.size(); ++i) inside[i] = own[i] >= 0 ? seconds[i] : 0;
    auto balanced = policy::balanced_layer_stages(*plan, pp, inside);
    ASSERT_TRUE(balanced);
    EXPECT_EQ(*balanced, *equal);
  }
}

// nnScaler's swin-10b plan (tp 4, pp 4 on 16 GPUs): the first stage's blocks run at 384x384 tokens,
// memory-bound, so it takes fewer layers than each other stage, and its cost is not the largest by far.
TEST(ForwardOpSeconds, SwinFirstStageTakesFewerLayers) {
  JobOptions options;
  options.model = "swin-10b";
  options.cluster = "dgx2";
  options.gpus = 16;
  options.dtype = ir::DType::f16;
  options.global_batch = 32;
  options.micro_batch_size = 1;
  options.recompute = policy::Recompute::full;
  const auto job = loaded(with_config(options, {.tp = 4, .pp = 4}));
  ASSERT_NE(job, nullptr);
  std::vector<double> seconds;
  const std::vector<int> stages = priced_stages(*job, seconds);
  ASSERT_EQ(stages.size(), job->graph.ops.size());
  std::vector<std::set<std::string_view>> layers(4);
  std::vector<double> cost(4, 0.0);
  for (const ir::Op& op : job->graph.ops) {
    if (stages[op.id.index()] < 0) continue;
    const auto s = static_cast<std::size_t>(stages[op.id.index()]);
    cost[s] += seconds[op.id.index()];
    if (const std::string_view layer = policy::layer_of(op.name); !layer.empty()) layers[s].insert(layer);
  }
  for (std::size_t s = 1; s < 4; ++s) EXPECT_LT(layers[0].size(), layers[s].size()) << "stage " << s;
  EXPECT_FALSE(policy::uniform_layers(job->graph, seconds));
  // Balanced: no stage's cost exceeds the mean by more than one layer's, the cut's granularity.
  const std::vector<double> per_layer = policy::layer_costs(job->graph, seconds);
  const double mean = (cost[0] + cost[1] + cost[2] + cost[3]) / 4;
  const double largest_layer = *std::ranges::max_element(per_layer);
  for (std::size_t s = 0; s < 4; ++s) EXPECT_LE(cost[s], mean + largest_layer) << "stage " << s;
  ::testing::Test::RecordProperty("stage_seconds",
                                  fmt::format("{:.3f} {:.3f} {:.3f} {:.3f}", cost[0], cost[1], cost[2], cost[3]));
  std::printf("swin-10b stage seconds %.3f %.3f %.3f %.3f, layers %zu %zu %zu %zu, largest layer %.3f\n", cost[0],
              cost[1], cost[2], cost[3], layers[0].size(), layers[1].size(), layers[2].size(), layers[3].size(),
              largest_layer);
}

TEST(ForwardOpCosts, HeldBytesAreTheSavedActivationsOrTheCheckpointsAndStateCoversTheModel) {
  // gpt3-125m (bf16, hidden 768), 8 layers, micro-batches of 2 x 256 tokens. Without recomputation a
  // micro-batch holds what the backward reads (the graph's saved activations over the 4 micro-batches);
  // with full recomputation much less, but at least every layer's input (its checkpoint). The state is at
  // least every parameter with its gradient and optimizer states. The working bytes (what each forward
  // writes, held or not) cover the held ones, and under full recomputation are far more than them.
  std::map<policy::Recompute, std::int64_t> held, working;
  for (const policy::Recompute recompute : {policy::Recompute::none, policy::Recompute::full}) {
    SCOPED_TRACE(policy::name(recompute));
    JobOptions options;
    options.model = "gpt3-125m";
    options.layers = 8;
    options.seq = 256;
    options.global_batch = 8;
    options.fold = Fold::off;
    const auto job = loaded(with_config(options, {.pp = 2, .micro_batches = 4, .recompute = recompute}));
    ASSERT_NE(job, nullptr);
    const auto costs = forward_op_costs(*job, job->request.config);
    ASSERT_TRUE(costs) << costs.error().to_string();
    const auto stats = ir::compute_stats(job->graph, job->catalog);
    ASSERT_TRUE(stats);
    ASSERT_EQ(costs->bytes.held.size(), job->graph.ops.size());
    ASSERT_EQ(costs->bytes.state.size(), job->graph.ops.size());
    ASSERT_EQ(costs->bytes.working.size(), job->graph.ops.size());
    EXPECT_EQ(costs->bytes.device, job->cluster.gpu.memory_bytes);
    std::int64_t state = 0;
    for (const ir::Op& op : job->graph.ops) {
      held[recompute] += costs->bytes.held[op.id.index()];
      working[recompute] += costs->bytes.working[op.id.index()];
      state += costs->bytes.state[op.id.index()];
      if (op.pass != ir::Pass::forward) {
        EXPECT_EQ(costs->bytes.held[op.id.index()] + costs->bytes.state[op.id.index()], 0) << op.name;
      }
    }
    EXPECT_GE(static_cast<double>(state), stats->parameter_bytes + stats->gradient_bytes + stats->optimizer_state_bytes);
    EXPECT_LT(state, costs->bytes.device);
    if (recompute == policy::Recompute::none) {
      EXPECT_NEAR(static_cast<double>(held[recompute]), stats->saved_activation_bytes / 4,
                  0.01 * stats->saved_activation_bytes / 4);
    }
  }
  EXPECT_GE(working[policy::Recompute::none], held[policy::Recompute::none]);
  EXPECT_GT(working[policy::Recompute::full], 4 * held[policy::Recompute::full]);
  EXPECT_GE(held[policy::Recompute::full], 8 * 2 * 256 * 768 * 2);
  EXPECT_LT(2 * held[policy::Recompute::full], held[policy::Recompute::none]);
}

}  // namespace
}  // namespace loom::api
