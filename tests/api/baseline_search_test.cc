// megatron-best (api/baseline_search.h) on a model that refuses sequence parallelism: its tp candidates
// leave sp off instead of failing, so tp plans where memory demands it.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "loom/api/baseline_search.h"
#include "loom/api/resolve_request.h"
#include "../temp_path.h"

namespace loom::api {
namespace {

namespace fs = std::filesystem;

JobOptions shrunk(const std::string& model, const std::string& policy) {
  JobOptions o;
  o.model = model;
  o.shrink = true;
  o.gpus = 4;
  o.policy = policy;
  return o;
}

std::int64_t peak(const Job& job) {
  return job.metrics.per_device[static_cast<std::size_t>(job.metrics.max_memory_device)].peak_bytes;
}

TEST(BaselineCandidates, SequenceParallelOnlyWhereTheModelTakesIt) {
  for (const auto& [model, takes] : {std::pair{"gpt3-125m", true}, std::pair{"swin-1.8b", false}}) {
    SCOPED_TRACE(model);
    auto loaded = load_job(shrunk(model, "megatron-best"));
    ASSERT_TRUE(loaded) << loaded.error().to_string();
    auto candidates = baseline_candidates(**loaded);
    ASSERT_TRUE(candidates) << candidates.error().to_string();
    int with_tp = 0;
    for (const BaselineCandidate& c : *candidates) {
      EXPECT_EQ(c.config.sequence_parallel, takes && c.config.tp > 1) << describe(c.policy, c.config);
      with_tp += c.config.tp > 1;
    }
    EXPECT_GT(with_tp, 0);
  }
}

// GPUs too small for any data-parallel Swin (each holds all weights and optimizer states) but large enough
// for tp 2 x dp 2: megatron-best must find a fitting plan with tp > 1, which it could not while its tp
// candidates asked for sequence parallelism.
TEST(BestBaseline, SwinTakesTensorParallelismWhereMemoryDemandsIt) {
  auto dp = plan_job(with_config(shrunk("swin-1.8b", "megatron"), {.dp = 4, .recompute = policy::Recompute::full}));
  auto tp = plan_job(
      with_config(shrunk("swin-1.8b", "megatron"), {.dp = 2, .tp = 2, .recompute = policy::Recompute::full}));
  ASSERT_TRUE(dp && tp);
  ASSERT_LT(peak(**tp), peak(**dp));  // the premise: tp shards the weights dp replicates
  const std::int64_t capacity = (peak(**tp) + peak(**dp)) / 2;
  const fs::path file = loom::testing::process_temp_path("loom_baseline_search_test_cluster", ".yaml");
  std::ofstream(file) << "name: \"small-a100\"\nnodes: 1\ngpus_per_node: 8\ngpu:\n  name: \"A100-small\"\n"
                      << "  peak_bf16: 312e12\n  peak_fp16: 312e12\n  peak_fp32: 19.5e12\n  memory_bytes: " << capacity
                      << "\n  memory_bandwidth: 2e12\nintra:\n  kind: nvswitch\n  bandwidth: 300e9\n  latency: 1e-6\n"
                      << "inter:\n  kind: infiniband\n  bandwidth: 25e9\n  latency: 5e-6\n"
                      << "nics_per_node: 8\nnic_bandwidth: 25e9\n";
  JobOptions options = shrunk("swin-1.8b", "megatron-best");
  options.cluster = file.string();
  auto result = best_baseline(options);
  fs::remove(file);
  ASSERT_TRUE(result) << result.error().to_string();
  const Job& best = *result->best;
  EXPECT_FALSE(best.metrics.out_of_memory()) << best.description;
  EXPECT_GT(best.request.config.tp, 1) << best.description;
  EXPECT_FALSE(best.request.config.sequence_parallel);
  EXPECT_EQ(result->summary.failed, 0);
}

}  // namespace
}  // namespace loom::api
