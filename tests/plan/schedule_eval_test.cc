// The schedule evaluator on uniform costs F = B = W = 1 (Qi et al. 2023, Table 1 with p stages):
// 1F1B's bubble (p - 1)(F + B + W), ZB-H1's (p - 1)(F + B - W), ZB-H2's none in steady state.
#include "loom/plan/schedule_eval.h"

#include <random>

#include <gtest/gtest.h>

namespace loom::plan {
namespace {

ScheduleEvaluation evaluate(ScheduleKind kind, int p, int m, BlockCosts costs = {}) {
  Expected<std::vector<std::vector<Block>>> blocks = schedule_blocks({.kind = kind}, p, m);
  EXPECT_TRUE(blocks) << blocks.error().to_string();
  Expected<ScheduleEvaluation> result = evaluate_schedule(blocks.value_or(std::vector<std::vector<Block>>{}), p, m, costs);
  EXPECT_TRUE(result) << name(kind) << " p " << p << " m " << m << ": " << result.error().to_string();
  return result.value_or(ScheduleEvaluation{});
}

TEST(EvaluateSchedule, OneFOneBBubbleIsThreeUnitsPerStage) {
  for (int p : {2, 4, 8}) {
    const ScheduleEvaluation e = evaluate(ScheduleKind::one_f_one_b, p, 2 * p);
    EXPECT_DOUBLE_EQ(e.makespan, 3 * 2 * p + 3 * (p - 1)) << p;
    EXPECT_DOUBLE_EQ(e.idle[0], 3 * (p - 1)) << p;
    for (int s = 0; s < p; ++s) EXPECT_EQ(e.peak_held[static_cast<std::size_t>(s)], p - s) << p;
  }
}

TEST(EvaluateSchedule, ZeroBubbleH1HasAThirdOfOneFOneBsBubbleAtItsPeak) {
  for (int p : {2, 3, 4, 8}) {
    for (int m : {p, 2 * p, 4 * p}) {
      const ScheduleEvaluation e = evaluate(ScheduleKind::zb_h1, p, m);
      EXPECT_DOUBLE_EQ(e.makespan, 3 * m + (p - 1)) << p << " " << m;
      EXPECT_DOUBLE_EQ(e.idle[0], p - 1) << p << " " << m;
      EXPECT_EQ(e.peak_held[0], p) << "1F1B's peak, p " << p << " m " << m;
      for (int held : e.peak_held) EXPECT_LE(held, p);
    }
  }
}

TEST(EvaluateSchedule, FourStagesEightMicroBatches) {  // the numbers docs/schedules.md quotes
  const ScheduleEvaluation h1 = evaluate(ScheduleKind::zb_h1, 4, 8);
  EXPECT_EQ(h1.idle, (std::vector<double>{3, 2, 1, 0}));
  EXPECT_EQ(h1.peak_held, (std::vector<int>{4, 4, 4, 4}));
  const ScheduleEvaluation h2 = evaluate(ScheduleKind::zb_h2, 4, 8);
  EXPECT_DOUBLE_EQ(h2.makespan, 27);
  EXPECT_EQ(h2.peak_held, (std::vector<int>{7, 7, 7, 7}));
  const ScheduleEvaluation one = evaluate(ScheduleKind::one_f_one_b, 4, 8);
  EXPECT_DOUBLE_EQ(one.makespan, 33);
  EXPECT_EQ(one.idle, (std::vector<double>{9, 6, 3, 0}));
  Expected<std::vector<std::vector<Block>>> v = schedule_blocks({.kind = ScheduleKind::zb_v, .chunks = 2}, 4, 8);
  ASSERT_TRUE(v);
  Expected<ScheduleEvaluation> zbv = evaluate_schedule(*v, 8, 8);  // in chunk units: half of the others'
  ASSERT_TRUE(zbv);
  EXPECT_DOUBLE_EQ(zbv->makespan, 51);
  EXPECT_EQ(zbv->idle, (std::vector<double>{3, 1, 0, 0}));
  EXPECT_EQ(zbv->peak_held, (std::vector<int>{8, 8, 8, 8}));
}

TEST(EvaluateSchedule, ZeroBubbleH2HasNoBubbleInSteadyState) {
  for (int p : {2, 3, 4, 8}) {
    for (int m : {2 * p, 3 * p + 1}) {
      const ScheduleEvaluation e = evaluate(ScheduleKind::zb_h2, p, m);
      EXPECT_DOUBLE_EQ(e.makespan, 3 * m + (p - 1)) << p << " " << m;
      for (double idle : e.idle) EXPECT_DOUBLE_EQ(idle, 0) << p << " " << m;
      EXPECT_EQ(e.peak_held[0], 2 * p - 1) << p << " " << m;
    }
  }
}

// ZB-V: 2p stages of half a layer range each, in a V; costs per chunk (a stage's block is two chunks').
TEST(EvaluateSchedule, ZeroBubbleVKeepsOneFOneBsPeakWithASmallBubble) {
  for (int p : {2, 4, 8}) {
    for (int m : {2 * p, 4 * p}) {
      Expected<std::vector<std::vector<Block>>> blocks = schedule_blocks({.kind = ScheduleKind::zb_v, .chunks = 2}, p, m);
      ASSERT_TRUE(blocks) << blocks.error().to_string();
      Expected<ScheduleEvaluation> e = evaluate_schedule(*blocks, 2 * p, m);
      ASSERT_TRUE(e) << e.error().to_string();
      // Each device works 6m chunk units; 1F1B's stage 0 idles 3 (p - 1) stage units = 6 (p - 1) chunk units.
      EXPECT_DOUBLE_EQ(e->makespan, 6 * m + (p - 1)) << p << " " << m;
      EXPECT_LE(e->idle[0], p - 1) << p << " " << m;
      for (int held : e->peak_held) EXPECT_LE(held, 2 * p) << "1F1B's p micro-batches of two chunks";
      for (std::size_t d = 0; d < blocks->size(); ++d)
        for (const Block& b : (*blocks)[d]) EXPECT_EQ(pipeline_device(ScheduleKind::zb_v, b.stage, p), static_cast<int>(d));
    }
  }
  Expected<std::vector<std::vector<Block>>> one_chunk = schedule_blocks({.kind = ScheduleKind::zb_v}, 2, 4);
  ASSERT_FALSE(one_chunk);
  EXPECT_EQ(one_chunk.error().message, "schedule zb-v: 1 model chunks per device; the V has 2");
}

TEST(EvaluateSchedule, UnevenCostsKeepTheOrderOfTheBubbles) {
  // F = 1, B = 1, W = 0.5: 1F1B's bubble (p - 1) 2.5 on stage 0, ZB-H1's below it.
  const BlockCosts costs{.forward = 1, .backward = 1, .weight = 0.5};
  const ScheduleEvaluation one = evaluate(ScheduleKind::one_f_one_b, 4, 8, costs);
  const ScheduleEvaluation h1 = evaluate(ScheduleKind::zb_h1, 4, 8, costs);
  EXPECT_DOUBLE_EQ(one.idle[0], 3 * 2.5);
  EXPECT_LT(h1.idle[0], one.idle[0]);
  EXPECT_LT(h1.makespan, one.makespan);
}

// Every template lists each (stage, micro-batch, part) once and runs without deadlock, for many (p, m).
TEST(EvaluateSchedule, EveryTemplateIsAValidOrderForRandomSizes) {
  std::mt19937 rng(14);
  std::uniform_int_distribution<int> devices(1, 9), micro(1, 24);
  for (int trial = 0; trial < 200; ++trial) {
    const int p = devices(rng), m = micro(rng);
    for (ScheduleKind kind : {ScheduleKind::gpipe, ScheduleKind::one_f_one_b, ScheduleKind::zb_h1, ScheduleKind::zb_h2}) {
      Expected<std::vector<std::vector<Block>>> blocks = schedule_blocks({.kind = kind}, p, m);
      ASSERT_TRUE(blocks) << blocks.error().to_string();
      std::size_t count = 0;
      for (const auto& seq : *blocks) count += seq.size();
      EXPECT_EQ(count, static_cast<std::size_t>((splits_backward(kind) ? 3 : 2) * p * m)) << name(kind);
      Expected<ScheduleEvaluation> e = evaluate_schedule(*blocks, p, m);
      ASSERT_TRUE(e) << name(kind) << " p " << p << " m " << m << ": " << e.error().to_string();
      EXPECT_GE(e->makespan, 3.0 * m) << name(kind);
    }
    Expected<std::vector<std::vector<Block>>> v = schedule_blocks({.kind = ScheduleKind::zb_v, .chunks = 2}, p, m);
    ASSERT_TRUE(v) << v.error().to_string();
    Expected<ScheduleEvaluation> e = evaluate_schedule(*v, 2 * p, m);
    ASSERT_TRUE(e) << "zb-v p " << p << " m " << m << ": " << e.error().to_string();
    EXPECT_GE(e->makespan, 6.0 * m);
  }
}

TEST(EvaluateSchedule, NamesDeadlocksDuplicatesAndMissingBlocks) {
  // Stage 0 wants B0 before its F0 has left for stage 1, which waits for that F0.
  const std::vector<std::vector<Block>> deadlock = {
      {{0, 0, BlockPart::backward}, {0, 0, BlockPart::forward}},
      {{1, 0, BlockPart::forward}, {1, 0, BlockPart::backward}}};
  Expected<ScheduleEvaluation> e = evaluate_schedule(deadlock, 2, 1);
  ASSERT_FALSE(e);
  EXPECT_EQ(e.error().message, "evaluate_schedule: the template deadlocks (device 0 at B0, device 1 at F0)");

  const std::vector<std::vector<Block>> twice = {{{0, 0, BlockPart::forward}, {0, 0, BlockPart::forward}}};
  e = evaluate_schedule(twice, 1, 1);
  ASSERT_FALSE(e);
  EXPECT_EQ(e.error().message, "evaluate_schedule: block F0 of stage 0 is listed twice");

  const std::vector<std::vector<Block>> missing = {{{0, 0, BlockPart::forward}}};
  e = evaluate_schedule(missing, 1, 1);
  ASSERT_FALSE(e);
  EXPECT_EQ(e.error().message, "evaluate_schedule: stage 0 has no B0");

  const std::vector<std::vector<Block>> some_weights = {
      {{0, 0, BlockPart::forward}, {0, 1, BlockPart::forward}, {0, 0, BlockPart::backward},
       {0, 0, BlockPart::weight}, {0, 1, BlockPart::backward}}};
  e = evaluate_schedule(some_weights, 1, 2);
  ASSERT_FALSE(e);
  EXPECT_EQ(e.error().message, "evaluate_schedule: stage 0 has W blocks for 1 of its 2 micro-batches");
}

TEST(ScheduleKindNames, RoundTripAndRefuseUnknown) {
  for (ScheduleKind kind : {ScheduleKind::gpipe, ScheduleKind::one_f_one_b, ScheduleKind::zb_h1, ScheduleKind::zb_h2,
                            ScheduleKind::zb_v, ScheduleKind::dualpipe_v})
    EXPECT_EQ(parse_schedule_kind(name(kind)).value(), kind);
  Expected<ScheduleKind> bad = parse_schedule_kind("zb-h3");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().message, "unknown schedule 'zb-h3'");
  EXPECT_FALSE(parse_schedule_kind("interleaved 1f1b"));
  EXPECT_EQ(to_string(Block{2, 5, BlockPart::weight}), "W5");
}

}  // namespace
}  // namespace loom::plan
