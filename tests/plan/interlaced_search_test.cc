// The interlaced order searched on real costs (plan/interlaced_schedule.h, search_interlaced): valid
// (every block once, E before its readers' F, H between the last stage's F and B, G after its readers'
// B, one shared order on every device), within 1F1B's peak of held micro-batches (or the caps given),
// never slower than the unit-cost order on the evaluator, deterministic; and on T5-like costs clearly
// faster, more so where the caps admit more held micro-batches.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "loom/plan/interlaced_schedule.h"

namespace loom::plan {
namespace {

using Sequences = std::vector<std::vector<InterlacedBlock>>;

// One line per broken rule of an interlaced order over `stages` devices.
std::vector<std::string> violations(const Sequences& seqs, int micro_batches, const std::vector<int>& readers) {
  std::vector<std::string> out;
  const int S = static_cast<int>(seqs.size());
  std::vector<InterlacedBlock> shared0;
  for (const InterlacedBlock& b : seqs.front())
    if (b.shared != SharedPart::none) shared0.push_back(b);
  for (int s = 0; s < S; ++s) {
    // Position of each block on device s, by its text ("F1.3", "H3").
    std::map<std::string, int> at;
    std::vector<InterlacedBlock> shared;
    for (std::size_t i = 0; i < seqs[static_cast<std::size_t>(s)].size(); ++i) {
      const InterlacedBlock& b = seqs[static_cast<std::size_t>(s)][i];
      if (!at.emplace(to_string(b), static_cast<int>(i)).second) out.push_back(fmt::format("device {}: {} twice", s, to_string(b)));
      if (b.shared != SharedPart::none) shared.push_back(b);
      else if (b.block.stage != s) out.push_back(fmt::format("device {}: {} of stage {}", s, to_string(b), b.block.stage));
    }
    if (shared != shared0) out.push_back(fmt::format("device {}: shared blocks differ from device 0's", s));
    const auto before = [&](const std::string& a, const std::string& b) {
      if (!at.contains(a) || !at.contains(b)) out.push_back(fmt::format("device {}: {} or {} missing", s, a, b));
      else if (at[a] > at[b]) out.push_back(fmt::format("device {}: {} after {}", s, a, b));
    };
    const bool reads = std::ranges::find(readers, s) != readers.end();
    for (int m = 0; m < micro_batches; ++m) {
      const std::string f = fmt::format("F{}.{}", s, m), b = fmt::format("B{}.{}", s, m);
      before(f, b);
      if (reads) before(fmt::format("E{}", m), f), before(b, fmt::format("G{}", m));
      if (s == S - 1) before(f, fmt::format("H{}", m)), before(fmt::format("H{}", m), b);
    }
    if (at.size() != static_cast<std::size_t>(5 * micro_batches))
      out.push_back(fmt::format("device {}: {} blocks, not 5 per micro-batch", s, at.size()));
  }
  return out;
}

InterlacedCosts random_costs(int stages, std::mt19937& rng) {
  std::uniform_real_distribution<double> forward(0.2, 2), ratio(1, 4), shared(0, 1.5);
  InterlacedCosts costs;
  for (int s = 0; s < stages; ++s) {
    costs.forward.push_back(forward(rng));
    costs.backward.push_back(costs.forward.back() * ratio(rng));
  }
  costs.embed_forward = shared(rng) / 10;
  costs.head = shared(rng);
  costs.embed_backward = shared(rng) / 5;
  return costs;
}

TEST(SearchInterlaced, RandomCostsGiveValidOrdersNeverSlowerThanTheUnitCostOne) {
  std::mt19937 rng(8);
  for (int trial = 0; trial < 40; ++trial) {
    const int stages = std::uniform_int_distribution<int>(2, 8)(rng);
    const int micro_batches = std::uniform_int_distribution<int>(2, 16)(rng);
    std::vector<int> readers{0};
    for (int s = 1; s < stages; ++s)
      if (std::bernoulli_distribution(0.3)(rng)) readers.push_back(s);
    const InterlacedCosts costs = random_costs(stages, rng);
    SCOPED_TRACE(::testing::Message() << stages << " stages, " << micro_batches << " micro-batches, " << readers.size()
                                      << " readers, head " << costs.head);
    const auto searched = search_interlaced(stages, micro_batches, readers, costs);
    ASSERT_TRUE(searched) << searched.error().to_string();
    const std::vector<std::string> broken = violations(searched->devices, micro_batches, readers);
    EXPECT_TRUE(broken.empty()) << searched->order << ": " << broken.front();
    // The reported numbers are the evaluator's for the order returned.
    const auto evaluated = evaluate_interlaced(searched->devices, micro_batches, readers, costs);
    ASSERT_TRUE(evaluated) << evaluated.error().to_string();
    EXPECT_EQ(evaluated->makespan, searched->evaluation.makespan);
    // Never slower than interlaced_blocks' order on the same costs; never more held than 1F1B's peak.
    const auto lockstep = interlaced_blocks(stages, micro_batches, readers);
    ASSERT_TRUE(lockstep);
    const auto unit = evaluate_interlaced(*lockstep, micro_batches, readers, costs);
    ASSERT_TRUE(unit) << unit.error().to_string();
    EXPECT_LE(searched->evaluation.makespan, unit->makespan) << searched->order;
    for (int held : searched->evaluation.peak_held) EXPECT_LE(held, stages) << searched->order;
    EXPECT_GT(searched->rollouts, 0);
  }
}

// A long pipeline (16 stages, 128 micro-batches: unbounded, ~7000 roll-outs and half a minute) searches
// within its roll-out budget, 2e9 / (16 x 128)^2 = 476, and still returns a valid order no slower than
// the unit-cost one.
TEST(SearchInterlaced, LongPipelinesStayWithinTheRollOutBudget) {
  const int stages = 16, micro_batches = 128;
  const InterlacedCosts costs{.forward = std::vector<double>(stages, 0.095),
                              .backward = std::vector<double>(stages, 0.285),
                              .embed_forward = 0.002, .head = 0.043, .embed_backward = 0.003};
  const std::vector<int> readers{0, stages / 2};
  const auto searched = search_interlaced(stages, micro_batches, readers, costs);
  ASSERT_TRUE(searched) << searched.error().to_string();
  EXPECT_LE(searched->rollouts, 476);
  const std::vector<std::string> broken = violations(searched->devices, micro_batches, readers);
  EXPECT_TRUE(broken.empty()) << searched->order << ": " << broken.front();
  const auto unit = evaluate_interlaced(*interlaced_blocks(stages, micro_batches, readers), micro_batches, readers, costs);
  ASSERT_TRUE(unit) << unit.error().to_string();
  EXPECT_LE(searched->evaluation.makespan, unit->makespan) << searched->order;
}

TEST(SearchInterlaced, IsDeterministic) {
  std::mt19937 rng(3);
  const InterlacedCosts costs = random_costs(5, rng);
  const auto a = search_interlaced(5, 11, std::vector<int>{0, 3}, costs);
  const auto b = search_interlaced(5, 11, std::vector<int>{0, 3}, costs);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->devices, b->devices);
  EXPECT_EQ(a->order, b->order);
  const std::vector<int> caps{9, 2, 7, 3, 11};
  const auto c = search_interlaced(5, 11, std::vector<int>{0, 3}, costs, caps);
  const auto d = search_interlaced(5, 11, std::vector<int>{0, 3}, costs, caps);
  ASSERT_TRUE(c && d);
  EXPECT_EQ(c->devices, d->devices);
  EXPECT_EQ(c->order, d->order);
}

TEST(SearchInterlaced, T5CostsLoseLessToBarriersThanTheUnitCostOrder) {
  // t5-3.9b on 4 GPUs (nnScaler Fig. 8, 8 micro-batches, full recompute), per micro-batch as the policy
  // derives them from the job's op_seconds: F 0.095 s, B 0.285 s on every stage, H 0.043 s, E 0.002 s,
  // G 0.003 s; readers: stage 0 (encoder) and stage 2 (decoder). The unit-cost order puts a barrier
  // after every other step, where most devices are inside a backward; the searched one has one barrier
  // per H, joined where the devices lose least, the E's before and the G's after everything.
  const InterlacedCosts costs{.forward = std::vector<double>(4, 0.095), .backward = std::vector<double>(4, 0.285),
                              .embed_forward = 0.002, .head = 0.043, .embed_backward = 0.003};
  const std::vector<int> readers{0, 2};
  const auto searched = search_interlaced(4, 8, readers, costs);
  ASSERT_TRUE(searched) << searched.error().to_string();
  const auto unit = evaluate_interlaced(*interlaced_blocks(4, 8, readers), 8, readers, costs);
  ASSERT_TRUE(unit);
  // 1F1B alone: (8 + 3) x 0.38 = 4.18 s; with the shared blocks' 8 x 0.048 on every device 4.56 s.
  EXPECT_LT(searched->evaluation.makespan, 0.93 * unit->makespan)
      << searched->order << ": " << searched->evaluation.makespan << " s against " << unit->makespan << " s";
  EXPECT_GT(searched->evaluation.makespan, 4.56);
  EXPECT_NE(searched->order, "lockstep");
}

TEST(SearchInterlaced, RandomCapsBoundWhatEachStageHolds) {
  // Per stage the given cap, raised to 1F1B's S - s and lowered to the micro-batches, bounds the
  // micro-batches it holds; the orders stay valid and are the evaluator's.
  std::mt19937 rng(21);
  for (int trial = 0; trial < 40; ++trial) {
    const int stages = std::uniform_int_distribution<int>(2, 6)(rng);
    const int micro_batches = std::uniform_int_distribution<int>(2, 12)(rng);
    const std::vector<int> readers{0};
    const InterlacedCosts costs = random_costs(stages, rng);
    std::vector<int> caps, expected;
    for (int s = 0; s < stages; ++s) {
      caps.push_back(std::uniform_int_distribution<int>(0, micro_batches + 2)(rng));
      expected.push_back(std::min(micro_batches, std::max(stages - s, caps.back())));
    }
    SCOPED_TRACE(::testing::Message() << stages << " stages, " << micro_batches << " micro-batches, caps "
                                      << fmt::format("{}", fmt::join(caps, " ")));
    const auto searched = search_interlaced(stages, micro_batches, readers, costs, caps);
    ASSERT_TRUE(searched) << searched.error().to_string();
    EXPECT_EQ(searched->caps, expected);
    const std::vector<std::string> broken = violations(searched->devices, micro_batches, readers);
    EXPECT_TRUE(broken.empty()) << searched->order << ": " << broken.front();
    const auto evaluated = evaluate_interlaced(searched->devices, micro_batches, readers, costs);
    ASSERT_TRUE(evaluated) << evaluated.error().to_string();
    EXPECT_EQ(evaluated->peak_held, searched->evaluation.peak_held);
    for (int s = 0; s < stages; ++s)
      EXPECT_LE(searched->evaluation.peak_held[static_cast<std::size_t>(s)], expected[static_cast<std::size_t>(s)])
          << searched->order << ", stage " << s;
  }
}

TEST(SearchInterlaced, RoomyCapsAdmitBiggerGroupsAndAShorterStepThanTheCountCap) {
  // The T5 costs above. The count cap (no caps given: S = 4 on every stage) keeps 1F1B's holds and one H
  // per barrier; caps of every micro-batch (memory to spare) admit more H's per barrier and warm-ups past
  // S, so the devices wait less at the barriers.
  const InterlacedCosts costs{.forward = std::vector<double>(4, 0.095), .backward = std::vector<double>(4, 0.285),
                              .embed_forward = 0.002, .head = 0.043, .embed_backward = 0.003};
  const std::vector<int> readers{0, 2};
  const auto counted = search_interlaced(4, 8, readers, costs);
  const auto roomy = search_interlaced(4, 8, readers, costs, std::vector<int>(4, 8));
  ASSERT_TRUE(counted && roomy);
  EXPECT_EQ(counted->caps, std::vector<int>(4, 4));
  EXPECT_EQ(roomy->caps, std::vector<int>(4, 8));
  EXPECT_GT(roomy->group, counted->group) << roomy->order << " against " << counted->order;
  EXPECT_LT(roomy->evaluation.makespan, counted->evaluation.makespan)
      << roomy->order << ": " << roomy->evaluation.makespan << " s against " << counted->evaluation.makespan << " s";
  EXPECT_GT(*std::ranges::max_element(roomy->evaluation.peak_held), 4);
  for (int held : counted->evaluation.peak_held) EXPECT_LE(held, 4);
  EXPECT_TRUE(violations(roomy->devices, 8, readers).empty());
  // Caps below 1F1B's own (a tiny headroom) give 1F1B's holds, S - s, within the count cap.
  const auto tiny = search_interlaced(4, 8, readers, costs, std::vector<int>(4, 0));
  ASSERT_TRUE(tiny);
  EXPECT_EQ(tiny->caps, (std::vector<int>{4, 3, 2, 1}));
  EXPECT_EQ(tiny->evaluation.peak_held, (std::vector<int>{4, 3, 2, 1}));
  EXPECT_EQ(tiny->group, 1);
  EXPECT_TRUE(violations(tiny->devices, 8, readers).empty());
}

TEST(SearchInterlaced, Errors) {
  const InterlacedCosts two{.forward = {1, 1}, .backward = {2, 2}};
  EXPECT_FALSE(search_interlaced(0, 4, std::vector<int>{}, two));
  const auto size = search_interlaced(3, 4, std::vector<int>{0}, two);
  ASSERT_FALSE(size);
  EXPECT_NE(size.error().to_string().find("costs for 2 and 2 stages, the pipeline has 3"), std::string::npos);
  InterlacedCosts negative = two;
  negative.head = -1;
  const auto bad = search_interlaced(2, 4, std::vector<int>{0}, negative);
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().to_string().find("a block costs -1 s"), std::string::npos);
  const auto caps = search_interlaced(2, 4, std::vector<int>{0}, two, std::vector<int>{4, 4, 4});
  ASSERT_FALSE(caps);
  EXPECT_NE(caps.error().to_string().find("held-micro-batch caps for 3 stages, the pipeline has 2"), std::string::npos);
}

}  // namespace
}  // namespace loom::plan
