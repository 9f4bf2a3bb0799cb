// search/plan_space.h: every candidate is a valid configuration of its policy for the facts (random
// facts), the families hold what they say, megatron-best's grid is inside the space, Oases' overlap is
// offered exactly where the policy takes it, and tp crosses nodes in auto's space only.
#include <gtest/gtest.h>

#include <random>
#include <set>

#include "loom/api/auto_search.h"
#include "loom/api/resolve_request.h"
#include "loom/policy/policy.h"
#include "loom/search/plan_space.h"
#include "testing/small_search_job.h"

namespace loom::search {
namespace {

TEST(EnumerateSpace, EveryCandidateIsValidForRandomFacts) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    SpaceFacts f{.gpus = 1 << (rng() % 7), .gpus_per_node = 8,
                 .global_batch = static_cast<std::int64_t>(1 + rng() % 128), .layers = static_cast<int>(rng() % 48)};
    const int sp_degree = 1 << (1 + rng() % 3);
    f.sequence_parallel = [&](int tp) { return tp <= sp_degree; };
    f.micro_batching = static_cast<MicroBatching>(rng() % 3);
    const bool gpipe = rng() % 2 == 0;
    std::set<std::string> seen;
    for (const Candidate& c : enumerate_space(f, {.gpipe = gpipe})) {
      const policy::ParallelConfig& p = c.config;
      SCOPED_TRACE(describe(c));
      EXPECT_TRUE(seen.insert(describe(c)).second);  // no duplicates
      EXPECT_EQ(policy::device_count(p), f.gpus);
      EXPECT_EQ(std::int64_t{p.dp} * c.micro_batch_size * p.micro_batches, f.global_batch);
      EXPECT_LE(p.tp, f.gpus_per_node);
      if (p.pp > 1) {
        EXPECT_GE(p.micro_batches, p.pp);
        if (f.layers > 0) {
          EXPECT_EQ(f.layers % (p.pp * p.virtual_stages), 0);
        }
      }
      if (p.virtual_stages > 1) {
        EXPECT_EQ(p.micro_batches % p.pp, 0);
      }
      // Only micro-batchings the policies take (policy/megatron_forward.cc): coupled micro-batches run
      // whole without a pipeline, and pipelined only by GPipe where every forward may come first.
      if (f.micro_batching != MicroBatching::independent) {
        if (p.pp == 1) {
          EXPECT_EQ(p.micro_batches, 1);
        } else {
          EXPECT_EQ(f.micro_batching, MicroBatching::forwards_first);
          EXPECT_TRUE(gpipe);
          EXPECT_EQ(p.schedule, plan::ScheduleKind::gpipe);
          EXPECT_EQ(p.virtual_stages, 1);
        }
      } else {
        EXPECT_TRUE(p.pp == 1 || p.schedule != plan::ScheduleKind::gpipe);
      }
      // Oases' overlapped candidates run without sequence parallelism.
      EXPECT_EQ(p.sequence_parallel, p.tp > 1 && p.tp <= sp_degree && p.overlap == policy::Overlap::none);
      switch (c.family) {
        case Family::megatron: EXPECT_EQ(p.zero, 0); EXPECT_EQ(c.policy, "megatron"); break;
        case Family::zero:
          EXPECT_EQ(c.policy, "zero");
          EXPECT_EQ(p.tp * p.pp, 1);
          EXPECT_GE(p.zero, 1);
          break;
        case Family::mixed:
          EXPECT_EQ(c.policy, "megatron");
          EXPECT_GT(p.dp, 1);
          EXPECT_GT(p.tp * p.pp, 1);
          EXPECT_GE(p.zero, 1);
          break;
      }
    }
  }
}

// megatron-best's grid as it was enumerated before the space (tp, pp, mbs, chunks) is inside the space with
// every recomputation, and deepspeed-best's (stage, mbs) with none and full.
TEST(EnumerateSpace, HoldsTheBaselinesGrids) {
  const SpaceFacts f{.gpus = 16, .gpus_per_node = 8, .global_batch = 64, .layers = 24,
                     .sequence_parallel = [](int) { return true; }};
  std::set<std::string> space;
  for (const Candidate& c : enumerate_space(f)) space.insert(describe(c));
  int grid = 0;
  for (int tp : {1, 2, 4, 8})
    for (int pp : {1, 2, 4, 8, 16}) {
      if (16 % (tp * pp) != 0 || (pp > 1 && 24 % pp != 0)) continue;
      const int dp = 16 / (tp * pp);
      for (int mbs : {1, 2, 4, 8}) {
        if (64 % (dp * mbs) != 0) continue;
        const int m = 64 / (dp * mbs);
        if (pp > 1 && m < pp) continue;
        for (int chunks : {1, 2}) {
          if (chunks > 1 && (pp == 1 || m % pp != 0 || 24 % (pp * chunks) != 0)) continue;
          for (auto r : {policy::Recompute::none, policy::Recompute::selective, policy::Recompute::full}) {
            policy::ParallelConfig c{.dp = dp, .tp = tp, .pp = pp, .micro_batches = m};
            c.virtual_stages = chunks;
            c.sequence_parallel = tp > 1;
            c.recompute = r;
            EXPECT_TRUE(space.contains(describe({Family::megatron, "megatron", c, mbs}))) << tp << " " << pp;
            ++grid;
          }
        }
      }
    }
  EXPECT_GT(grid, 50);
  for (int stage : {1, 2, 3})
    for (int mbs : {1, 2, 4}) {
      policy::ParallelConfig c{.dp = 16, .micro_batches = 64 / (16 * mbs)};
      c.zero = stage;
      EXPECT_TRUE(space.contains(describe({Family::zero, "zero", c, mbs})));
    }
}

// A model whose micro-batches are coupled (batch norms) gets each family's whole-batch candidates (batch /
// dp per rank, outside the micro-batch sizes 1-8), and GPipe pipelines where every forward may come first.
TEST(EnumerateSpace, CoupledMicroBatchesRunWholeOrInGPipe) {
  for (MicroBatching coupling : {MicroBatching::forwards_first, MicroBatching::whole_batch}) {
    const SpaceFacts f{.gpus = 8, .gpus_per_node = 8, .global_batch = 128, .layers = 0, .micro_batching = coupling};
    std::set<std::string> space;
    int pipelines = 0;
    for (const Candidate& c : enumerate_space(f)) {
      space.insert(describe(c));
      pipelines += c.config.pp > 1;
    }
    EXPECT_TRUE(space.contains("megatron dp 8 tp 1 pp 1 mbs 16 m 1"));
    EXPECT_TRUE(space.contains("megatron dp 1 tp 8 pp 1 mbs 128 m 1"));
    EXPECT_TRUE(space.contains("zero dp 8 tp 1 pp 1 mbs 16 m 1 zero 3 recompute full"));
    EXPECT_TRUE(space.contains("megatron dp 4 tp 2 pp 1 mbs 32 m 1 zero 2"));
    if (coupling == MicroBatching::whole_batch) {
      EXPECT_EQ(pipelines, 0);
      continue;
    }
    EXPECT_TRUE(space.contains("megatron dp 4 tp 1 pp 2 mbs 8 m 4 gpipe"));
    EXPECT_TRUE(space.contains("megatron dp 2 tp 2 pp 2 mbs 8 m 8 gpipe zero 1"));
    // The baselines' pipelines are 1F1B: no GPipe, so their grids keep only the whole batches.
    for (const Candidate& c : enumerate_space(f, {.gpipe = false})) EXPECT_EQ(c.config.pp, 1) << describe(c);
  }
}

// A candidate's twin with the other overlap (Oases' candidates drop sequence parallelism).
std::string twin_with_overlap(Candidate c, bool sequence_parallel) {
  c.config.overlap = c.config.overlap == policy::Overlap::none ? policy::Overlap::oases : policy::Overlap::none;
  c.config.sequence_parallel = c.config.overlap == policy::Overlap::none && sequence_parallel;
  return describe(c);
}

// Random facts: every megatron candidate without overlap has its overlapped twin exactly where
// takes_overlap says and the micro-batches are independent; every overlapped one is megatron's, with
// tp > 1, an even micro-batch size and a 1F1B or GPipe schedule of one chunk. The baselines' filter has none.
TEST(EnumerateSpace, OverlapExactlyWhereTheRuleTakesIt) {
  std::mt19937 rng(29);
  int overlapped = 0, refused = 0;
  for (int trial = 0; trial < 200; ++trial) {
    SpaceFacts f{.gpus = 1 << (rng() % 6), .gpus_per_node = 8,
                 .global_batch = static_cast<std::int64_t>(1 + rng() % 128), .layers = static_cast<int>(rng() % 48)};
    const bool sp = rng() % 2 == 0;
    f.sequence_parallel = [sp](int) { return sp; };
    f.micro_batching = static_cast<MicroBatching>(rng() % 3);
    const std::vector<Candidate> space = enumerate_space(f);
    std::set<std::string> names;
    for (const Candidate& c : space) names.insert(describe(c));
    for (const Candidate& c : space) {
      SCOPED_TRACE(describe(c));
      const policy::ParallelConfig& p = c.config;
      if (p.overlap == policy::Overlap::oases) {
        ++overlapped;
        EXPECT_EQ(c.family, Family::megatron);
        EXPECT_EQ(f.micro_batching, MicroBatching::independent);
        EXPECT_GT(p.tp, 1);
        EXPECT_EQ(c.micro_batch_size % 2, 0);
        EXPECT_TRUE(p.pp == 1 || (p.virtual_stages == 1 && (p.schedule == plan::ScheduleKind::one_f_one_b ||
                                                             p.schedule == plan::ScheduleKind::gpipe)));
        EXPECT_TRUE(names.contains(twin_with_overlap(c, sp)));
        EXPECT_FALSE(in_baseline_grids(p, 0));
      } else if (c.family == Family::megatron) {
        const bool expected = f.micro_batching == MicroBatching::independent && takes_overlap(p, c.micro_batch_size);
        refused += !expected;
        EXPECT_EQ(names.contains(twin_with_overlap(c, sp)), expected);
      } else {
        EXPECT_FALSE(names.contains(twin_with_overlap(c, sp)));
      }
    }
    for (const Candidate& c : enumerate_space(f, {.overlap = false}))
      EXPECT_EQ(c.config.overlap, policy::Overlap::none) << describe(c);
  }
  EXPECT_GT(overlapped, 100);
  EXPECT_GT(refused, 100);
}

// takes_overlap against the policy itself: on gpt3-125m over 8 GPUs, each megatron candidate of the
// space that the policy plans is planned with Oases' overlap switched on (sequence parallelism off) by
// policy::apply_policy exactly when the space holds its overlapped twin (the policy's refusals: tp 1, an
// odd batch per micro-batch, interleaved or zero-bubble pipelines).
TEST(EnumerateSpace, OverlapWhereThePolicyPlansIt) {
  api::JobOptions o = api::testing::small_search_job("gpt3-125m", "auto", 8);
  o.global_batch = 24;  // micro-batch sizes 1-8 over dp 1-8: odd and even ones
  auto loaded = api::load_job(o);
  ASSERT_TRUE(loaded) << loaded.error().to_string();
  auto facts = api::space_facts(**loaded);
  ASSERT_TRUE(facts);
  const std::vector<Candidate> space = enumerate_space(*facts);
  std::set<std::string> names;
  for (const Candidate& c : space) names.insert(describe(c));
  int planned = 0, refused = 0;
  for (const Candidate& c : space) {
    if (c.family != Family::megatron || c.config.overlap != policy::Overlap::none ||
        c.config.recompute != policy::Recompute::none)
      continue;
    SCOPED_TRACE(describe(c));
    const auto plans_with = [&](const policy::ParallelConfig& config) {
      auto fresh = plan::make_plan((*loaded)->graph, (*loaded)->catalog);
      return fresh && policy::apply_policy(*fresh, "megatron", config, (*loaded)->catalog).has_value();
    };
    if (!plans_with(c.config)) continue;  // refused without the overlap too (tp 8 over 12 heads)
    policy::ParallelConfig overlapped = c.config;
    overlapped.overlap = policy::Overlap::oases;
    overlapped.sequence_parallel = false;
    const bool plans = plans_with(overlapped);
    EXPECT_EQ(names.contains(twin_with_overlap(c, c.config.sequence_parallel)), plans);
    planned += plans;
    refused += !plans;
  }
  EXPECT_GT(planned, 3);
  EXPECT_GT(refused, 3);
}

// auto's space puts tp above a node's GPUs (across nodes); the baselines' filter keeps it inside one.
TEST(EnumerateSpace, TpCrossesNodesInAutosSpaceOnly) {
  const SpaceFacts f{.gpus = 32, .gpus_per_node = 4, .global_batch = 32, .layers = 8};
  int across = 0;
  for (const Candidate& c : enumerate_space(f)) {
    across += c.config.tp > 4;
    EXPECT_EQ(in_baseline_grids(c.config, 4), c.config.tp <= 4 && in_baseline_grids(c.config, 0)) << describe(c);
  }
  EXPECT_GT(across, 0);
  for (const Candidate& c : enumerate_space(f, {.tp_across_nodes = false})) EXPECT_LE(c.config.tp, 4) << describe(c);
}

TEST(EnumerateSpace, FilterKeepsTheChosenFamilies) {
  const SpaceFacts f{.gpus = 8, .gpus_per_node = 8, .global_batch = 32, .layers = 8};
  for (const Candidate& c : enumerate_space(f, {.megatron = false, .zero = true, .mixed = false}))
    EXPECT_EQ(c.family, Family::zero);
  for (const Candidate& c : enumerate_space(f, {.megatron = true, .zero = false, .mixed = false, .zero_bubble = false})) {
    EXPECT_EQ(c.family, Family::megatron);
    EXPECT_FALSE(plan::splits_backward(c.config.schedule));
  }
}

}  // namespace
}  // namespace loom::search
