// DualPipeV (schedule.h, ScheduleKind::dualpipe_v) against the reference's order (deepseek-ai/DualPipe,
// dualpipev.py) and on the evaluator with uniform costs F = B = W = 1 per chunk.
#include <random>
#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "loom/plan/schedule_eval.h"

namespace loom::plan {
namespace {

constexpr Schedule kDualPipeV{.kind = ScheduleKind::dualpipe_v, .chunks = 2};
constexpr Schedule kZeroBubbleV{.kind = ScheduleKind::zb_v, .chunks = 2};

std::string sequence_text(const std::vector<Block>& blocks) {
  std::string text;
  for (const Block& b : blocks) text += fmt::format("{}{}:{} ", part_letter(b.part), b.stage, b.micro_batch);
  if (!text.empty()) text.pop_back();
  return text;
}

ScheduleEvaluation evaluate(Schedule schedule, int p, int m) {
  Expected<std::vector<std::vector<Block>>> blocks = schedule_blocks(schedule, p, m);
  EXPECT_TRUE(blocks) << blocks.error().to_string();
  Expected<ScheduleEvaluation> e = evaluate_schedule(blocks.value_or(std::vector<std::vector<Block>>{}), 2 * p, m);
  EXPECT_TRUE(e) << name(schedule.kind) << " p " << p << " m " << m << ": " << e.error().to_string();
  return e.value_or(ScheduleEvaluation{});
}

// p = 2, m = 4, written out by hand from DualPipeV.step's eight phases ("F3:1" is the forward of stage 3
// for micro-batch 1). Device 0 holds stages 0 and 3, device 1 stages 1 and 2.
TEST(DualPipeV, FollowsTheReferencePhasesOnTwoDevices) {
  Expected<std::vector<std::vector<Block>>> blocks = schedule_blocks(kDualPipeV, 2, 4);
  ASSERT_TRUE(blocks) << blocks.error().to_string();
  ASSERT_EQ(blocks->size(), 2u);
  // nF0 | nF0F1 | nB1W1F1 | F0 B1, F1 B0 | B1, F1 B0 | B1 B0 (B0's W deferred) | W B0 (deferred) | W
  EXPECT_EQ(sequence_text((*blocks)[0]),
            "F0:0 F0:1 F0:2 F3:0 B3:0 W3:0 F3:1 F0:3 B3:1 W3:1 F3:2 B0:0 W0:0 B3:2 W3:2 F3:3 B0:1 W0:1 "
            "B3:3 W3:3 B0:2 W0:2 B0:3 W0:3");
  // nF0F1 twice | (F0 B1, F1 B0) twice | B1 B0 with W's, then B1 B0 deferred | the two W's owed
  EXPECT_EQ(sequence_text((*blocks)[1]),
            "F1:0 F2:0 F1:1 F2:1 F1:2 B2:0 W2:0 F2:2 B1:0 W1:0 F1:3 B2:1 W2:1 F2:3 B1:1 W1:1 "
            "B2:2 W2:2 B1:2 W1:2 B2:3 B1:3 W2:3 W1:3");
}

// The numbers docs/schedules.md quotes, in chunk units, beside ZB-V's: the same makespan (the pairs are
// not fused, so DualPipeV's overlap buys nothing here), a bubble falling by one per device, and one chunk
// activation more on every device: the reference's PP + 1 for PP = 2p stages, where ZB-V holds 2p.
TEST(DualPipeV, FourDevicesBesideZeroBubbleV) {
  for (int m : {8, 16}) {
    const ScheduleEvaluation dual = evaluate(kDualPipeV, 4, m);
    const ScheduleEvaluation v = evaluate(kZeroBubbleV, 4, m);
    EXPECT_DOUBLE_EQ(dual.makespan, 6 * m + 3) << m;  // 51 and 99
    EXPECT_DOUBLE_EQ(v.makespan, 6 * m + 3) << m;
    EXPECT_EQ(dual.idle, (std::vector<double>{3, 2, 1, 0})) << m;
    EXPECT_EQ(v.idle, (std::vector<double>{3, 1, 0, 0})) << m;
    EXPECT_EQ(dual.peak_held, (std::vector<int>{9, 9, 9, 9})) << m;
    EXPECT_EQ(v.peak_held, (std::vector<int>{8, 8, 8, 8})) << m;
  }
}

// Many (p, m): every (stage, micro-batch, part) once, on its device of the V, no deadlock; device d's
// bubble p - 1 - d and peak 2p + 1 chunks; and the pairs: each device runs 2 (m - 2p + d + 1) + p - d - 1
// forwards each followed at once by a backward of its other chunk.
TEST(DualPipeV, EveryBlockOnceWithoutDeadlockForRandomSizes) {
  std::mt19937 rng(14);
  std::uniform_int_distribution<int> devices(1, 9), extra(0, 24);
  for (int trial = 0; trial < 200; ++trial) {
    const int p = devices(rng), m = 2 * p + extra(rng);
    Expected<std::vector<std::vector<Block>>> blocks = schedule_blocks(kDualPipeV, p, m);
    ASSERT_TRUE(blocks) << blocks.error().to_string();
    std::size_t count = 0;
    for (std::size_t d = 0; d < blocks->size(); ++d) {
      const std::vector<Block>& seq = (*blocks)[d];
      count += seq.size();
      int pairs = 0;
      for (std::size_t k = 0; k < seq.size(); ++k) {
        EXPECT_EQ(pipeline_device(ScheduleKind::dualpipe_v, seq[k].stage, p), static_cast<int>(d));
        if (k + 1 < seq.size() && seq[k].part == BlockPart::forward && seq[k + 1].part == BlockPart::backward &&
            seq[k].stage != seq[k + 1].stage)
          ++pairs;
      }
      const int dev = static_cast<int>(d);
      EXPECT_EQ(pairs, 2 * (m - 2 * p + dev + 1) + p - dev - 1) << "p " << p << " m " << m << " device " << d;
    }
    EXPECT_EQ(count, static_cast<std::size_t>(3 * 2 * p * m));
    Expected<ScheduleEvaluation> e = evaluate_schedule(*blocks, 2 * p, m);
    ASSERT_TRUE(e) << "p " << p << " m " << m << ": " << e.error().to_string();
    EXPECT_DOUBLE_EQ(e->makespan, 6 * m + p - 1) << "p " << p << " m " << m;
    for (int d = 0; d < p; ++d) {
      EXPECT_DOUBLE_EQ(e->idle[static_cast<std::size_t>(d)], p - 1 - d) << "p " << p << " m " << m;
      EXPECT_EQ(e->peak_held[static_cast<std::size_t>(d)], 2 * p + 1) << "p " << p << " m " << m;
    }
  }
}

TEST(DualPipeV, RefusesFewMicroBatchesAndOtherChunkCounts) {
  Expected<std::vector<std::vector<Block>>> few = schedule_blocks(kDualPipeV, 4, 7);
  ASSERT_FALSE(few);
  EXPECT_EQ(few.error().message,
            "schedule dualpipe-v: 7 micro-batches for 4 pipeline devices; DualPipeV needs at least 2 per device (8)");
  Expected<std::vector<std::vector<Block>>> one_chunk = schedule_blocks({.kind = ScheduleKind::dualpipe_v}, 2, 4);
  ASSERT_FALSE(one_chunk);
  EXPECT_EQ(one_chunk.error().message, "schedule dualpipe-v: 1 model chunks per device; the V has 2");
  EXPECT_TRUE(splits_backward(ScheduleKind::dualpipe_v));
  EXPECT_EQ(parse_schedule_kind("dualpipe-v").value(), ScheduleKind::dualpipe_v);
}

}  // namespace
}  // namespace loom::plan
