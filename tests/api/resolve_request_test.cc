// api/resolve_request.h: the one place defaults are resolved, with Megatron-LM's semantics.
#include <gtest/gtest.h>

#include <random>

#include "loom/api/resolve_request.h"
#include "loom/cluster/presets.h"

namespace loom::api {
namespace {

cluster::Cluster cluster_of(const std::string& name) { return cluster::make_cluster(name).value(); }

JobOptions megatron(int tp, int pp) {
  JobOptions o;
  o.model = "gpt3-1.3b";
  o.tp = tp;
  o.pp = pp;
  return o;
}

TEST(ResolveRequest, DpIsTheClustersGpusOverTpTimesPp) {
  // `loom plan --tp 8 --pp 4` on 64 GPUs: dp 2, as Megatron-LM derives it from the world size.
  const auto r = resolve_request(megatron(8, 4), cluster_of("dgx-a100x8"), 512);
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->gpus, 64);
  EXPECT_EQ(r->config.dp, 2);
  EXPECT_EQ(r->config.micro_batches, 8);  // 2 x pp when pipelined
}

TEST(ResolveRequest, MicroBatchesFromTheMicroBatchSize) {
  JobOptions o = megatron(8, 4);
  o.micro_batch_size = 4;
  const auto r = resolve_request(o, cluster_of("dgx-a100x8"), 512);
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->config.micro_batches, 512 / (2 * 4));
  o.micro_batches = 3;
  const auto disagree = resolve_request(o, cluster_of("dgx-a100x8"), 512);
  ASSERT_FALSE(disagree);
  EXPECT_NE(disagree.error().message.find("disagrees"), std::string::npos);
  o.micro_batches = 0;
  o.micro_batch_size = 3;
  const auto indivisible = resolve_request(o, cluster_of("dgx-a100x8"), 512);
  ASSERT_FALSE(indivisible);
  EXPECT_NE(indivisible.error().message.find("does not divide"), std::string::npos);
}

TEST(ResolveRequest, GpusLeftUnusedAreAnErrorWithTheFix) {
  JobOptions o = megatron(2, 1);
  o.dp = 2;
  const auto r = resolve_request(o, cluster_of("dgx-a100"), 8);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message, "dp 2 x tp 2 x pp 1 uses 4 GPUs, but the job has 8 (4 left unused)");
  EXPECT_NE(r.error().hint.find("--gpus 4"), std::string::npos);
  o.gpus = 4;
  EXPECT_TRUE(resolve_request(o, cluster_of("dgx-a100"), 8));
  // A policy without dp cannot absorb the rest.
  JobOptions tp;
  tp.model = "gpt3-1.3b";
  tp.policy = "tp";
  tp.tp = 4;
  EXPECT_FALSE(resolve_request(tp, cluster_of("dgx-a100"), 8));
  tp.gpus = 16;
  const auto too_many = resolve_request(tp, cluster_of("dgx-a100"), 8);
  ASSERT_FALSE(too_many);
  EXPECT_NE(too_many.error().message.find("cluster 'dgx-a100' has 8"), std::string::npos);
}

TEST(ResolveRequest, WithoutDegreesThePolicysDefaultsOnEveryGpu) {
  JobOptions o;
  o.model = "gpt3-1.3b";
  const auto r = resolve_request(o, cluster_of("dgx-a100x2"), 32);
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->gpus, 16);
  EXPECT_EQ(r->config.tp, 8);
  EXPECT_EQ(r->config.dp, 2);
  EXPECT_EQ(r->config.micro_batches, 1);
}

// Random degrees on random clusters: the resolved degrees use exactly the job's GPUs, or resolution
// fails; dp, when derived, is GPUs / (tp x pp).
TEST(ResolveRequest, ResolvedDegreesAlwaysUseExactlyTheGpus) {
  std::mt19937 random(11);
  const std::vector<std::string> clusters = {"dgx-a100", "dgx-a100x2", "dgx-a100x4", "v100x8x2", "dgx-h100x8"};
  std::uniform_int_distribution<int> degree(0, 8), pick(0, static_cast<int>(clusters.size()) - 1);
  for (int i = 0; i < 3000; ++i) {
    JobOptions o;
    o.model = "gpt3-1.3b";
    o.dp = degree(random) % 3 == 0 ? degree(random) : 0;
    o.tp = degree(random);
    o.pp = degree(random) % 4;
    const cluster::Cluster c = cluster_of(clusters[static_cast<std::size_t>(pick(random))]);
    const auto r = resolve_request(o, c, 1024);
    if (!r) continue;
    EXPECT_EQ(policy::device_count(r->config), r->gpus);
    EXPECT_EQ(r->gpus, c.device_count());
    if (o.dp == 0 && (o.tp > 0 || o.pp > 0)) {
      EXPECT_EQ(r->config.dp * std::max(o.tp, 1) * std::max(o.pp, 1), r->gpus);
    }
    EXPECT_EQ(r->config.micro_batches, r->config.pp > 1 ? 2 * r->config.pp : 1);
  }
}

TEST(ResolveRequest, WithConfigResolvesToThatConfig) {
  const policy::ParallelConfig c{.dp = 2, .tp = 2, .pp = 2, .micro_batches = 6, .virtual_stages = 1, .zero = 1};
  JobOptions o;
  o.model = "gpt3-1.3b";
  const auto r = resolve_request(with_config(o, c), cluster_of("dgx-a100"), 48);
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->config.dp, 2);
  EXPECT_EQ(r->config.tp, 2);
  EXPECT_EQ(r->config.pp, 2);
  EXPECT_EQ(r->config.micro_batches, 6);
  EXPECT_EQ(r->config.zero, 1);
}

TEST(ResolveRequest, OptionsCheckedBeforeAnyModelIsBuilt) {
  JobOptions none;
  EXPECT_NE(check_options(none).error().message.find("no model"), std::string::npos);
  JobOptions both;
  both.model = "gpt3-1.3b";
  both.graph_file = "g.json";
  EXPECT_NE(check_options(both).error().message.find("several models"), std::string::npos);
  JobOptions resized;
  resized.graph_file = "g.json";
  resized.seq = 128;
  EXPECT_FALSE(check_options(resized));
  JobOptions unknown;
  unknown.model = "gpt3-1.3b";
  unknown.policy = "zigzag";
  EXPECT_NE(check_options(unknown).error().message.find("unknown policy 'zigzag'"), std::string::npos);
}

}  // namespace
}  // namespace loom::api
