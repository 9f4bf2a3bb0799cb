// Megatron-LM's interleaved 1F1B (Narayanan et al. 2021, §2.2): the template against hand-written
// sequences, its laws over many (devices, chunks, micro-batches) through a block-level simulation (every
// block once, no deadlock, the bubble (p - 1) / (v m + p - 1)), and apply_schedule with several stages
// on one device.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>
#include <string>
#include <tuple>

#include "loom/plan/micro_batches.h"
#include "loom/plan/schedule.h"
#include "loom/plan/validate.h"
#include "plan_test_graph.h"

namespace loom::plan {
namespace {

constexpr Schedule interleaved(int chunks) { return {.kind = ScheduleKind::interleaved_one_f_one_b, .chunks = chunks}; }

// "F2" for chunk 0 of a device, "F2'" for chunk 1, "F2''" for chunk 2.
std::vector<std::string> labels(const std::vector<Block>& sequence, int devices) {
  std::vector<std::string> out;
  for (const Block& b : sequence)
    out.push_back(to_string(b) + std::string(static_cast<std::size_t>(b.stage / devices), '\''));
  return out;
}

using Labels = std::vector<std::string>;

TEST(InterleavedTemplate, TwoDevicesTwoChunksFourMicroBatches) {
  const auto blocks = schedule_blocks(interleaved(2), 2, 4);
  ASSERT_TRUE(blocks) << blocks.error().to_string();
  ASSERT_EQ(blocks->size(), 2u);
  // Device 0 warms up with 2 (p - 1) + (v - 1) p = 4 forwards: micro-batches 0, 1 through chunk 0, then
  // through chunk 1; then forward/backward pairs; backwards run chunk 1 before chunk 0.
  EXPECT_EQ(labels((*blocks)[0], 2),
            (Labels{"F0", "F1", "F0'", "F1'", "F2", "B0'", "F3", "B1'", "F2'", "B0", "F3'", "B1", "B2'", "B3'", "B2", "B3"}));
  EXPECT_EQ(labels((*blocks)[1], 2),
            (Labels{"F0", "F1", "F0'", "B0'", "F1'", "B1'", "F2", "B0", "F3", "B1", "F2'", "B2'", "F3'", "B3'", "B2", "B3"}));
}

// Narayanan et al. Figure 4: four devices, two chunks, eight micro-batches.
TEST(InterleavedTemplate, FourDevicesTwoChunksEightMicroBatches) {
  const auto blocks = schedule_blocks(interleaved(2), 4, 8);
  ASSERT_TRUE(blocks) << blocks.error().to_string();
  EXPECT_EQ(labels((*blocks)[0], 4),
            (Labels{"F0", "F1", "F2", "F3", "F0'", "F1'", "F2'", "F3'", "F4", "F5", "F6", "B0'", "F7", "B1'", "F4'", "B2'",
                    "F5'", "B3'", "F6'", "B0", "F7'", "B1", "B2", "B3", "B4'", "B5'", "B6'", "B7'", "B4", "B5", "B6", "B7"}));
  EXPECT_EQ(labels((*blocks)[3], 4),
            (Labels{"F0", "F1", "F2", "F3", "F0'", "B0'", "F1'", "B1'", "F2'", "B2'", "F3'", "B3'", "F4", "B0", "F5", "B1",
                    "F6", "B2", "F7", "B3", "F4'", "B4'", "F5'", "B5'", "F6'", "B6'", "F7'", "B7'", "B4", "B5", "B6", "B7"}));
}

// As many micro-batches as devices: the warm-up covers everything but the last device's first chunks.
TEST(InterleavedTemplate, MicroBatchesEqualToDevices) {
  const auto blocks = schedule_blocks(interleaved(3), 3, 3);
  ASSERT_TRUE(blocks) << blocks.error().to_string();
  EXPECT_EQ(labels((*blocks)[0], 3), (Labels{"F0", "F1", "F2", "F0'", "F1'", "F2'", "F0''", "F1''", "F2''", "B0''", "B1''",
                                             "B2''", "B0'", "B1'", "B2'", "B0", "B1", "B2"}));
  EXPECT_EQ(labels((*blocks)[2], 3), (Labels{"F0", "F1", "F2", "F0'", "F1'", "F2'", "F0''", "B0''", "F1''", "B1''", "F2''",
                                             "B2''", "B0'", "B1'", "B2'", "B0", "B1", "B2"}));
}

// One micro-batch (the slice of a folded plan, exec/fold.h) passes the chunks in order and back.
TEST(InterleavedTemplate, OneMicroBatchPassesTheChunksAndBack) {
  const auto blocks = schedule_blocks(interleaved(3), 4, 1);
  ASSERT_TRUE(blocks) << blocks.error().to_string();
  EXPECT_EQ(labels((*blocks)[0], 4), (Labels{"F0", "F0'", "F0''", "B0''", "B0'", "B0"}));
  EXPECT_EQ((*blocks)[2][1].stage, 4 + 2);  // chunk 1 of device 2
}

TEST(InterleavedTemplate, Errors) {
  const auto ragged = schedule_blocks(interleaved(2), 2, 3);
  ASSERT_FALSE(ragged);
  EXPECT_NE(ragged.error().message.find("3 micro-batches are not a multiple of the 2 pipeline devices"),
            std::string::npos)
      << ragged.error().message;
  const auto chunks_without_interleaving = schedule_blocks({.kind = ScheduleKind::one_f_one_b, .chunks = 2}, 2, 4);
  ASSERT_FALSE(chunks_without_interleaving);
  EXPECT_NE(chunks_without_interleaving.error().message.find("need the interleaved 1F1B schedule"), std::string::npos);
  EXPECT_FALSE(schedule_blocks(interleaved(0), 2, 4));
  EXPECT_FALSE(schedule_blocks(interleaved(2), 0, 4));
}

// Runs a template with block durations forward 1 / v and backward 2 / v per stage (uniform stages, a
// device's work per micro-batch 3 whatever v is): a block starts when its device is free and the blocks
// it needs are done (the forward of the previous stage; the backward of the next stage, or the stage's
// own forward on the last). Returns the idle fraction, or -1 on a deadlock.
double block_level_idle_fraction(const std::vector<std::vector<Block>>& blocks, int stages, int chunks) {
  std::map<std::tuple<int, int, BlockPart>, double> done;  // (stage, micro-batch, pass) -> end
  std::vector<std::size_t> next(blocks.size(), 0);
  std::vector<double> free(blocks.size(), 0.0);
  double busy = 0, step = 0;
  for (bool progress = true; progress;) {
    progress = false;
    for (std::size_t d = 0; d < blocks.size(); ++d) {
      if (next[d] == blocks[d].size()) continue;
      const Block& b = blocks[d][next[d]];
      const bool forward = b.part == BlockPart::forward;
      const auto need = forward ? std::tuple{b.stage - 1, b.micro_batch, BlockPart::forward}
                        : b.stage + 1 < stages ? std::tuple{b.stage + 1, b.micro_batch, BlockPart::backward}
                                               : std::tuple{b.stage, b.micro_batch, BlockPart::forward};
      double start = free[d];
      if (!(forward && b.stage == 0)) {
        const auto it = done.find(need);
        if (it == done.end()) continue;
        start = std::max(start, it->second);
      }
      const double duration = (forward ? 1.0 : 2.0) / chunks;
      free[d] = start + duration;
      done[{b.stage, b.micro_batch, b.part}] = free[d];
      busy += duration;
      step = std::max(step, free[d]);
      ++next[d];
      progress = true;
    }
  }
  for (std::size_t d = 0; d < blocks.size(); ++d)
    if (next[d] != blocks[d].size()) return -1;
  return 1.0 - busy / (step * static_cast<double>(blocks.size()));
}

// Random (p, v, m): every device runs each (stage it holds, micro-batch, pass) exactly once, the
// forwards of a stage in micro-batch order, without deadlock, and the bubble is Megatron's: ideal time
// (p - 1) / v micro-batch times, an idle fraction of (p - 1) / (v m + p - 1). 1F1B and GPipe (v = 1) give
// (p - 1) / (m + p - 1).
TEST(InterleavedTemplate, EveryBlockOnceNoDeadlockAndMegatronsBubble) {
  std::mt19937 rng(20240604);
  for (int trial = 0; trial < 300; ++trial) {
    const int p = std::uniform_int_distribution(1, 6)(rng);
    const int v = std::uniform_int_distribution(1, 4)(rng);
    const int m = p * std::uniform_int_distribution(1, 5)(rng);
    SCOPED_TRACE(fmt::format("p {} v {} m {}", p, v, m));
    const auto blocks = schedule_blocks(interleaved(v), p, m);
    ASSERT_TRUE(blocks) << blocks.error().to_string();
    ASSERT_EQ(blocks->size(), static_cast<std::size_t>(p));
    for (int d = 0; d < p; ++d) {
      const auto& seq = (*blocks)[static_cast<std::size_t>(d)];
      std::set<std::tuple<int, int, BlockPart>> seen;
      std::map<int, int> next_forward;  // by stage
      for (const Block& b : seq) {
        EXPECT_EQ(b.stage % p, d);
        EXPECT_TRUE(seen.insert({b.stage, b.micro_batch, b.part}).second) << to_string(b) << " twice";
        if (b.part == BlockPart::forward) {
          EXPECT_EQ(b.micro_batch, next_forward[b.stage]++);
        }
      }
      EXPECT_EQ(seen.size(), static_cast<std::size_t>(2 * v * m));
    }
    EXPECT_NEAR(block_level_idle_fraction(*blocks, p * v, v), (p - 1.0) / (v * m + p - 1.0), 1e-9);
    for (ScheduleKind kind : {ScheduleKind::gpipe, ScheduleKind::one_f_one_b}) {
      const auto plain = schedule_blocks({kind}, p, m);
      ASSERT_TRUE(plain);
      EXPECT_NEAR(block_level_idle_fraction(*plain, p, 1), (p - 1.0) / (m + p - 1.0), 1e-9);
    }
  }
}

// The small MLP as four stages (fc1, act, fc2, loss) on two devices, two chunks each: stages 0 and 2 on
// device 0, 1 and 3 on device 1.
struct FourStages {
  Plan plan;
  std::vector<std::vector<std::vector<SubOpId>>> stages;
};

FourStages four_stages(int micro_batches) {
  FourStages t{testing::fresh_plan(), {}};
  const ir::Graph& g = testing::graph();
  std::vector<ir::OpId> forward;
  std::map<std::string, int> stage_of;
  for (const ir::Op& op : g.ops)
    if (op.pass == ir::Pass::forward) {
      stage_of[op.name] = static_cast<int>(forward.size());
      forward.push_back(op.id);
    }
  EXPECT_EQ(forward.size(), 4u);
  auto mb = split_micro_batches(t.plan, forward, micro_batches);
  EXPECT_TRUE(mb) << mb.error().to_string();
  t.stages.resize(4);
  for (int s = 0; s < 4; ++s)
    for (int m = 0; m < micro_batches; ++m) {
      const ir::OpId op = forward[static_cast<std::size_t>(s)];
      t.stages[static_cast<std::size_t>(s)].push_back(mb->micro_batch(std::span(&op, 1), m));
      EXPECT_TRUE(stage(t.plan, t.stages[static_cast<std::size_t>(s)].back(), s % 2));
    }
  // Optimizer steps with their parameter's layer, the loss-gradient seed with the loss (device 1).
  for (const ir::Op& op : g.ops)
    if (op.pass == ir::Pass::optimizer) {
      const int s = g.tensor(op.inputs[0]).name.starts_with("fc1") ? 0 : 2;
      EXPECT_TRUE(stage(t.plan, t.plan.parts[op.id.index()], s % 2));
    } else if (op.pass == ir::Pass::backward && !op.is_mirror()) {
      EXPECT_TRUE(stage(t.plan, t.plan.parts[op.id.index()], 1));
    }
  return t;
}

TEST(InterleavedApply, TwoChunksPerDeviceValidate) {
  for (int m : {2, 4}) {
    SCOPED_TRACE(m);
    FourStages t = four_stages(m);
    auto blocks = apply_schedule(t.plan, interleaved(2), t.stages);
    ASSERT_TRUE(blocks) << blocks.error().to_string();
    ASSERT_EQ(blocks->size(), 2u);
    EXPECT_EQ((*blocks)[0].size(), static_cast<std::size_t>(4 * m));
    auto valid = validate_plan(t.plan, 2);
    EXPECT_TRUE(valid) << valid.error().to_string();
  }
}

TEST(InterleavedApply, ChunksOfOneDeviceMustShareIt) {
  FourStages t = four_stages(2);
  // Stage 2 (chunk 1 of pipeline device 0) moved to device 1, where stages 1 and 3 run.
  for (const auto& m : t.stages[2]) ASSERT_TRUE(stage(t.plan, m, 1));
  auto blocks = apply_schedule(t.plan, interleaved(2), t.stages);
  ASSERT_FALSE(blocks);
  EXPECT_NE(blocks.error().message.find("stage 2 is on device 1, but the other chunks of pipeline device 0 are on device 0"),
            std::string::npos)
      << blocks.error().message;
  // Without interleaving, four stages on two devices share them.
  FourStages u = four_stages(2);
  auto plain = apply_schedule(u.plan, {ScheduleKind::one_f_one_b}, u.stages);
  ASSERT_FALSE(plain);
  EXPECT_NE(plain.error().message.find("shares device 0"), std::string::npos) << plain.error().message;
  // One micro-batch (a folded slice) goes through the chunks and back (ragged counts: Errors above).
  FourStages w = four_stages(1);
  auto one = apply_schedule(w.plan, interleaved(2), w.stages);
  ASSERT_TRUE(one) << one.error().message;
  EXPECT_EQ(labels((*one)[0], 2), (Labels{"F0", "F0'", "B0'", "B0"}));
  // Stages the chunks do not divide.
  FourStages x = four_stages(2);
  auto three = apply_schedule(x.plan, interleaved(3), x.stages);
  ASSERT_FALSE(three);
  EXPECT_NE(three.error().message.find("4 stages do not divide into 3 chunks"), std::string::npos)
      << three.error().message;
}

}  // namespace
}  // namespace loom::plan
