// search/analytic_cost.h on facts made by hand: the exact step and memory of its formulas where they are
// plain sums, the 1F1B bubble of a uniform pipeline, and the directions every change must move them.
#include <gtest/gtest.h>

#include "loom/cluster/presets.h"
#include "loom/search/analytic_cost.h"

namespace loom::search {
namespace {

constexpr std::int64_t kGiB = 1LL << 30;

CostFacts hand_facts(double backward = 2e-3) {
  CostFacts f;
  f.layers = 8;
  f.forward_ops = 100;
  f.device_memory = 80 * kGiB;
  for (int tp : {1, 2}) {
    for (std::int64_t mbs : {1, 2})
      for (auto r : {policy::Recompute::none, policy::Recompute::full}) {
        ClassFacts c;
        c.layer = {1e-3 * mbs / tp, backward * mbs / tp};
        c.first = {1e-4, 2e-4};
        c.last = {3e-4, 6e-4};
        c.optimizer_layer = 5e-4 / tp;
        c.optimizer_rest = 1e-4;
        c.held_layer = (r == policy::Recompute::full ? 10 : 100) * (1LL << 20) * mbs / tp;
        c.held_first = 1 << 20;
        c.held_last = 4 << 20;
        c.workspace = 1 << 20;
        f.classes[{tp, mbs, r}] = c;
      }
    f.state[tp] = {.layer = {.bytes = {kGiB / tp, kGiB / tp, 6 * kGiB / tp}},
                   .first = {.bytes = {kGiB / 4, kGiB / 4, kGiB}},
                   .last = {}};
  }
  return f;
}

Candidate megatron(int dp, int tp, int pp, int m, std::int64_t mbs = 1) {
  policy::ParallelConfig c{.dp = dp, .tp = tp, .pp = pp, .micro_batches = m};
  return {Family::megatron, "megatron", c, mbs};
}

Expected<Estimate> price(const CostFacts& f, const Candidate& c) {
  static const cluster::Cluster cluster = *cluster::make_cluster("dgx-a100x128");
  return AnalyticCoster(f, cluster).price(c);
}

TEST(AnalyticCost, OneDeviceIsThePlainSum) {
  const CostFacts f = hand_facts();
  const auto e = price(f, megatron(1, 1, 1, 4));
  ASSERT_TRUE(e) << e.error().to_string();
  const double per_mb = 8 * (1e-3 + 2e-3) + (1e-4 + 2e-4) + (3e-4 + 6e-4);
  EXPECT_NEAR(e->pipeline_seconds, 4 * per_mb, 1e-12);
  EXPECT_EQ(e->sync_seconds, 0);
  EXPECT_NEAR(e->optimizer_seconds, 8 * 5e-4 + 1e-4, 1e-12);
  EXPECT_NEAR(e->step_seconds, 4 * per_mb + 8 * 5e-4 + 1e-4, 1e-12);
  const std::int64_t state = 8 * 8 * kGiB + kGiB / 4 + kGiB / 4 + kGiB;
  EXPECT_EQ(e->peak_bytes, state + 8 * 100 * (1LL << 20) + (1 << 20) + (4 << 20) + (1 << 20));
  EXPECT_TRUE(e->fits);  // 66.3 GiB of 80
  CostFacts small = f;
  small.device_memory = e->peak_bytes - 1;
  EXPECT_FALSE(price(small, megatron(1, 1, 1, 4))->fits);
}

TEST(AnalyticCost, UniformOneFOneBPipelineHasItsBubble) {
  CostFacts f = hand_facts();
  for (auto& [key, c] : f.classes) c.first = c.last = {};  // uniform stages; boundary_bytes 0: no sends
  const auto e = price(f, megatron(1, 1, 4, 8));
  ASSERT_TRUE(e) << e.error().to_string();
  const double per_stage = 2 * (1e-3 + 2e-3);
  EXPECT_NEAR(e->pipeline_seconds, (8 + 4 - 1) * per_stage, 1e-9);  // (m + p - 1)(F + B)
  // Device 0 holds p micro-batches of its 2 layers at 1F1B's peak.
  const std::int64_t state = 2 * 8 * kGiB + kGiB / 4 + kGiB / 4 + kGiB;
  EXPECT_EQ(e->peak_bytes, state + 4 * 2 * 100 * (1LL << 20) + 4 * (4 << 20) + (1 << 20));
}

TEST(AnalyticCost, ChangesMoveTheEstimateTheRightWay) {
  const CostFacts f = hand_facts();
  const auto plain = *price(f, megatron(1, 1, 4, 8));
  Candidate interleaved = megatron(1, 1, 4, 8);
  interleaved.config.virtual_stages = 2;
  EXPECT_LT(price(f, interleaved)->pipeline_seconds, plain.pipeline_seconds);  // a smaller bubble
  EXPECT_GT(price(hand_facts(4e-3), megatron(1, 1, 4, 8))->step_seconds, plain.step_seconds);
  Candidate full = megatron(1, 1, 4, 8);
  full.config.recompute = policy::Recompute::full;
  EXPECT_LT(price(f, full)->peak_bytes, plain.peak_bytes);
  // Data parallelism adds a gradient all-reduce; ZeRO shards the state, stage 3 the most.
  const auto dp = *price(f, megatron(8, 2, 1, 2));
  EXPECT_GT(dp.sync_seconds, 0);
  std::int64_t last_peak = dp.peak_bytes;
  for (int zero : {1, 2, 3}) {
    Candidate z = megatron(8, 2, 1, 2);
    z.config.zero = zero;
    z.family = Family::mixed;
    const auto e = *price(f, z);
    EXPECT_LT(e.peak_bytes, last_peak) << zero;
    EXPECT_LT(e.optimizer_seconds, dp.optimizer_seconds);
    last_peak = e.peak_bytes;
  }
}

// ZeRO splits a parameter only along a dimension dp divides (policy/zero.h): GPT-3 13B's [5140, 20560]
// MLP weight splits 8 ways (20560 = 8 x 2570) but not 32, so ZeRO-3 over 32 ranks keeps it whole.
TEST(AnalyticCost, ZeroShardsOnlyWhatDpDivides) {
  const SegmentState mlp{.bytes = {}, .shapes = {{5140, 20560}, {20560}}};
  EXPECT_DOUBLE_EQ(mlp.zero_fraction(8), 1.0 / 8);
  EXPECT_DOUBLE_EQ(mlp.zero_fraction(32), 1.0);
  const SegmentState mixed{.bytes = {}, .shapes = {{64, 3}, {5, 7}}};  // 192 split 4 ways, 35 whole
  EXPECT_DOUBLE_EQ(mixed.zero_fraction(4), (192.0 / 4 + 35) / 227);
  CostFacts f = hand_facts();
  Candidate z{Family::zero, "zero", {.dp = 32, .micro_batches = 1}, 1};
  z.config.zero = 3;
  const std::int64_t sharded = price(f, z)->peak_bytes;
  f.state[1].layer.shapes = {{5140, 20560}};
  f.state[1].first.shapes = {{5140, 20560}};
  EXPECT_GT(price(f, z)->peak_bytes, sharded + 8 * 6 * kGiB);  // the layers' optimizer states stay whole
}

TEST(AnalyticCost, PlannableFollowsTheFullPathsLimits) {
  CostFacts f = hand_facts();
  f.forward_ops = 5000;
  Candidate zero{Family::zero, "zero", {.dp = 1024, .micro_batches = 2}, 1};
  zero.config.zero = 3;
  // 3 x 5000 x 1024 x 2 sub-ops; ZeRO folds over micro-batches only and within one node.
  EXPECT_FALSE(price(f, zero)->plannable);
  EXPECT_FALSE(price(f, zero)->folds);
  EXPECT_TRUE(price(f, megatron(512, 2, 1, 2))->plannable);  // folds
  EXPECT_TRUE(price(f, megatron(512, 2, 1, 2))->cheap);
  Candidate zero64{Family::zero, "zero", {.dp = 64, .micro_batches = 1}, 1};
  zero64.config.zero = 3;
  f.forward_ops = 1000;
  const auto e = price(f, zero64);  // 192,000 sub-ops: planned explicitly in seconds
  EXPECT_TRUE(e->plannable && e->cheap);
  EXPECT_FALSE(e->folds);  // one micro-batch: nothing to fold
  zero64.config.micro_batches = 4;  // 768,000: planned, but slowly (64 GPUs span nodes: not folded)
  EXPECT_TRUE(price(f, zero64)->plannable);
  EXPECT_FALSE(price(f, zero64)->folds || price(f, zero64)->cheap);
  Candidate zero8{Family::zero, "zero", {.dp = 8, .micro_batches = 64}, 1};  // one node: folds
  zero8.config.zero = 2;
  EXPECT_TRUE(price(f, zero8)->folds && price(f, zero8)->cheap && price(f, zero8)->plannable);
  f.preset = false;
  EXPECT_FALSE(price(f, megatron(512, 2, 1, 2))->plannable);  // a graph file cannot fold
  EXPECT_FALSE(price(f, zero8)->folds || price(f, zero8)->cheap);  // planned explicitly, slowly
}

TEST(AnalyticCost, UnmeasuredClassIsAnError) {
  const auto e = price(hand_facts(), megatron(1, 4, 1, 1));
  ASSERT_FALSE(e);
  EXPECT_NE(e.error().message.find("no measured facts"), std::string::npos);
}

TEST(AnalyticCost, BetterPrefersFittingThenFaster) {
  const Estimate fast_oom{.step_seconds = 1, .peak_bytes = 90, .fits = false};
  const Estimate slow_fit{.step_seconds = 2, .peak_bytes = 10, .fits = true};
  const Estimate fast_fit{.step_seconds = 1.5, .peak_bytes = 50, .fits = true};
  EXPECT_TRUE(better(slow_fit, fast_oom));
  EXPECT_TRUE(better(fast_fit, slow_fit));
  EXPECT_FALSE(better(slow_fit, slow_fit));
}

}  // namespace
}  // namespace loom::search
