// search/plan_space.h: every candidate is a valid configuration of its policy for the facts (random
// facts), the families hold what they say, and megatron-best's grid is inside the space.
#include <gtest/gtest.h>

#include <random>
#include <set>

#include "loom/search/plan_space.h"

namespace loom::search {
namespace {

TEST(EnumerateSpace, EveryCandidateIsValidForRandomFacts) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    SpaceFacts f{.gpus = 1 << (rng() % 7), .gpus_per_node = 8,
                 .global_batch = static_cast<std::int64_t>(1 + rng() % 128), .layers = static_cast<int>(rng() % 48)};
    const int sp_degree = 1 << (1 + rng() % 3);
    f.sequence_parallel = [&](int tp) { return tp <= sp_degree; };
    std::set<std::string> seen;
    for (const Candidate& c : enumerate_space(f)) {
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
      EXPECT_EQ(p.sequence_parallel, p.tp > 1 && p.tp <= sp_degree);
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
