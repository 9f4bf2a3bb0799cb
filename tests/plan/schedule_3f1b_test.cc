// nnScaler's 3F1B (schedule_3f1b.h): Table 7's constraints in the searched order, every block once, a
// deterministic search, and its bubble against the passes run as plain GPipe or 1F1B blocks (uniform
// costs F = 1, B = 2: evaluate_schedule's whole backward with backward = weight = 1).
#include <algorithm>
#include <random>
#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "loom/core/strings.h"
#include "loom/plan/schedule_3f1b.h"

namespace loom::plan {
namespace {

using Template = std::vector<std::vector<Block>>;

ThreeFOneBSearch search(int S, int P, int m) {
  Expected<ThreeFOneBSearch> found = search_three_f_one_b(S, P, m);
  EXPECT_TRUE(found) << found.error().to_string();
  return found.value_or(ThreeFOneBSearch{});
}

ScheduleEvaluation evaluate(const Template& t, int S, int P, int m) {
  Expected<ScheduleEvaluation> e = evaluate_schedule(t, S * P, m);
  EXPECT_TRUE(e) << e.error().to_string();
  return e.value_or(ScheduleEvaluation{});
}

// The passes as plain GPipe blocks: on each device every forward of pass 1, then of pass 2, ..., then
// every backward of the last pass.
Template gpipe_passes(int S, int P, int m) {
  Template t(static_cast<std::size_t>(S));
  for (int s = 0; s < S; ++s) {
    for (int p = 0; p < P; ++p)
      for (int k = 0; k < m; ++k) t[static_cast<std::size_t>(s)].push_back({p * S + s, k, BlockPart::forward});
    for (int k = 0; k < m; ++k) t[static_cast<std::size_t>(s)].push_back({(P - 1) * S + s, k, BlockPart::backward});
  }
  return t;
}

// The passes as plain 1F1B blocks: a micro-batch's P forwards back to back stand for 1F1B's F (the left
// of nnScaler Fig. 2: one micro-batch after another), S - s of them before the first backward.
Template one_f_one_b_passes(int S, int P, int m) {
  Template t(static_cast<std::size_t>(S));
  for (int s = 0; s < S; ++s) {
    auto& seq = t[static_cast<std::size_t>(s)];
    const auto forwards = [&](int k) {
      for (int p = 0; p < P; ++p) seq.push_back({p * S + s, k, BlockPart::forward});
    };
    const int warm_up = std::min(S - s, m);
    for (int k = 0; k < warm_up; ++k) forwards(k);
    for (int k = 0; k < m; ++k) {
      seq.push_back({(P - 1) * S + s, k, BlockPart::backward});
      if (k + warm_up < m) forwards(k + warm_up);
    }
  }
  return t;
}

struct Case {
  int S, P, m;
};

// Random sizes: 1-6 devices, 2-4 passes (AlphaFold2's shrunk 2, its presets' 4), 1-12 micro-batches.
std::vector<Case> random_cases(int count) {
  std::mt19937 rng(3);
  std::vector<Case> cases;
  for (int i = 0; i < count; ++i)
    cases.push_back({std::uniform_int_distribution(1, 6)(rng), std::uniform_int_distribution(2, 4)(rng),
                     std::uniform_int_distribution(1, 12)(rng)});
  return cases;
}

TEST(ThreeFOneB, SearchedOrderObeysTable7AndRunsEveryBlockOnce) {
  for (const auto [S, P, m] : random_cases(40)) {
    const ThreeFOneBSearch found = search(S, P, m);
    const std::string context = fmt::format("S {} P {} m {}", S, P, m);
    ASSERT_EQ(found.devices.size(), static_cast<std::size_t>(S)) << context;
    EXPECT_EQ(join(three_f_one_b_violations(found.devices, P, m), "; "), "") << context;
    for (const auto& seq : found.devices) EXPECT_EQ(seq.size(), static_cast<std::size_t>((P + 1) * m)) << context;
    // The evaluator ran it (no deadlock) and its last-pass activations stay within 1F1B's S - s.
    ASSERT_EQ(found.evaluation.peak_held.size(), static_cast<std::size_t>(S)) << context;
    for (int s = 0; s < S; ++s) EXPECT_LE(found.evaluation.peak_held[static_cast<std::size_t>(s)], S - s) << context;
  }
}

TEST(ThreeFOneB, ViolationsNameBrokenConstraintsAndMissingBlocks) {
  const ThreeFOneBSearch found = search(4, 3, 8);
  ASSERT_TRUE(three_f_one_b_violations(found.devices, 3, 8).empty());
  const auto broken = [&](auto edit) {
    Template t = found.devices;
    edit(t[0]);
    return join(three_f_one_b_violations(t, 3, 8), "; ");
  };
  const auto at = [](std::vector<Block>& seq, Block b) { return std::ranges::find(seq, b); };
  // (1): f1 of micro-batch 2 after f2 of micro-batch 1.
  EXPECT_NE(broken([&](std::vector<Block>& seq) { std::iter_swap(at(seq, {0, 2, BlockPart::forward}),
                                                                 at(seq, {4, 1, BlockPart::forward})); })
                .find("Table 7 (1)/(2)"),
            std::string::npos);
  // (3): on stage 0 (ofst 3), b1 before f3 of micro-batch 4.
  EXPECT_NE(broken([&](std::vector<Block>& seq) { std::iter_swap(at(seq, {8, 4, BlockPart::forward}),
                                                                 at(seq, {8, 1, BlockPart::backward})); })
                .find("Table 7 (3)"),
            std::string::npos);
  EXPECT_NE(broken([](std::vector<Block>& seq) { seq.pop_back(); }).find("missing"), std::string::npos);
  EXPECT_NE(broken([](std::vector<Block>& seq) { seq.push_back({0, 0, BlockPart::backward}); }).find("does not belong"),
            std::string::npos);
}

TEST(ThreeFOneB, SearchIsDeterministic) {
  for (const auto [S, P, m] : random_cases(8)) {
    const ThreeFOneBSearch a = search(S, P, m), b = search(S, P, m);
    EXPECT_EQ(a.devices, b.devices) << S << " " << P << " " << m;
    EXPECT_EQ(a.rollouts, b.rollouts);
    EXPECT_EQ(a.recycles_ahead, b.recycles_ahead);
  }
}

// On uniform costs the searched template is never slower than the passes run as GPipe or as 1F1B
// blocks, and it holds 1F1B's S - s last-pass activations where GPipe holds m.
TEST(ThreeFOneB, NoWorseThanThePassesAsGPipeOrOneFOneBBlocks) {
  for (const auto [S, P, m] : random_cases(40)) {
    const std::string context = fmt::format("S {} P {} m {}", S, P, m);
    const ThreeFOneBSearch found = search(S, P, m);
    const ScheduleEvaluation gpipe = evaluate(gpipe_passes(S, P, m), S, P, m);
    const ScheduleEvaluation one_f_one_b = evaluate(one_f_one_b_passes(S, P, m), S, P, m);
    EXPECT_LE(found.evaluation.makespan, gpipe.makespan) << context;
    EXPECT_LE(found.evaluation.makespan, one_f_one_b.makespan) << context;
    EXPECT_LE(found.evaluation.idle.front(), gpipe.idle.front()) << context;
    EXPECT_LE(found.evaluation.idle.front(), one_f_one_b.idle.front()) << context;
  }
  // S = 4, P = 4 (AlphaFold2's 3 recycles + 1), m = 8: GPipe's makespan and bubble (9 on stage 0) at
  // half its memory; the passes back to back as 1F1B's F idle 81 on stage 0.
  const ThreeFOneBSearch found = search(4, 4, 8);
  const ScheduleEvaluation gpipe = evaluate(gpipe_passes(4, 4, 8), 4, 4, 8);
  const ScheduleEvaluation one_f_one_b = evaluate(one_f_one_b_passes(4, 4, 8), 4, 4, 8);
  EXPECT_EQ(found.evaluation.makespan, 57);
  EXPECT_EQ(found.evaluation.idle, (std::vector<double>{9, 6, 3, 0}));
  EXPECT_EQ(found.evaluation.peak_held, (std::vector<int>{4, 3, 2, 1}));
  EXPECT_EQ(gpipe.makespan, 57);
  EXPECT_EQ(gpipe.peak_held, (std::vector<int>{8, 8, 8, 8}));
  EXPECT_EQ(one_f_one_b.makespan, 129);
  EXPECT_EQ(one_f_one_b.idle.front(), 81);
}

TEST(ThreeFOneB, ScheduleBlocksRunsTheSearchAndRefusesOnePass) {
  Expected<Template> blocks = schedule_blocks({.kind = ScheduleKind::three_f_one_b, .chunks = 4}, 4, 8);
  ASSERT_TRUE(blocks) << blocks.error().to_string();
  EXPECT_EQ(*blocks, search(4, 4, 8).devices);
  Expected<Template> one_pass = schedule_blocks({.kind = ScheduleKind::three_f_one_b, .chunks = 1}, 4, 8);
  ASSERT_FALSE(one_pass);
  EXPECT_NE(one_pass.error().message.find("2 passes"), std::string::npos) << one_pass.error().to_string();
  EXPECT_EQ(parse_schedule_kind("3f1b").value_or(ScheduleKind::gpipe), ScheduleKind::three_f_one_b);
}

// evaluate_schedule: leading stages may run forward only; a later one may not.
TEST(ThreeFOneB, EvaluatorTakesForwardOnlyStagesOnlyAtTheFront) {
  const Template t = gpipe_passes(2, 2, 2);
  EXPECT_TRUE(evaluate_schedule(t, 4, 2));
  Template late = t;  // stage 3's backwards removed: the last stage runs forward only
  for (auto& seq : late) std::erase_if(seq, [](const Block& b) { return b.part == BlockPart::backward && b.stage == 3; });
  const Expected<ScheduleEvaluation> e = evaluate_schedule(late, 4, 2);
  ASSERT_FALSE(e);
  EXPECT_NE(e.error().message.find("stage 3 has no B0"), std::string::npos) << e.error().to_string();
}

}  // namespace
}  // namespace loom::plan
