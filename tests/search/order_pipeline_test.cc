// Pipeline schedules through the order search (search/order_pipeline.h): the known optima of the
// templates on uniform costs (1F1B's (m + S - 1)(F + B), ZB-H1's smaller bubble with W apart), and
// nnScaler's 3F1B under Table 7: every constraint kept, no slower than the pilot search
// (plan/schedule_3f1b.h), each result re-timed by plan::evaluate_schedule.
#include "loom/search/order_pipeline.h"

#include <random>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "loom/core/strings.h"
#include "loom/plan/schedule_3f1b.h"

namespace loom::search {
namespace {

PipelineOrder searched(const PipelineOrderShape& shape) {
  Expected<PipelineOrder> found = search_pipeline_order(shape);
  EXPECT_TRUE(found) << found.error().to_string();
  return found.value_or(PipelineOrder{});
}

double template_makespan(plan::ScheduleKind kind, int S, int m, plan::BlockCosts costs,
                         std::vector<int>* peak = nullptr) {
  const auto blocks = plan::schedule_blocks({.kind = kind}, S, m);
  EXPECT_TRUE(blocks) << blocks.error().to_string();
  const auto e = plan::evaluate_schedule(blocks.value_or(std::vector<std::vector<plan::Block>>{}), S, m, costs);
  EXPECT_TRUE(e) << e.error().to_string();
  if (peak && e) *peak = e->peak_held;
  return e ? e->makespan : -1;
}

// 1F1B's memory (S - d activations on device d): the optimum is 1F1B's (m + S - 1)(F + B), proven, and
// the solver finds it without the greedy's bound too.
TEST(PipelineOrder, FindsOneFOneBsMakespanUnderItsMemory) {
  for (int S : {2, 3, 4})
    for (int m : {S, 2 * S, 3 * S})
      for (plan::BlockCosts costs : {plan::BlockCosts{1, 1, 1}, plan::BlockCosts{2, 2, 1.5}})
        for (bool greedy : {true, false}) {
          const std::string context = fmt::format("S {} m {} F {} greedy {}", S, m, costs.forward, greedy);
          const PipelineOrder found = searched(
              {.devices = S, .micro_batches = m, .costs = costs, .greedy_upper_bound = greedy});
          const double whole = costs.forward + costs.backward + costs.weight;
          EXPECT_DOUBLE_EQ(found.evaluation.makespan, (m + S - 1) * whole) << context;
          EXPECT_DOUBLE_EQ(found.evaluation.makespan, template_makespan(plan::ScheduleKind::one_f_one_b, S, m, costs))
              << context;
          EXPECT_TRUE(found.solution.proven_optimal) << context;
          for (int d = 0; d < S; ++d) EXPECT_LE(found.evaluation.peak_held[static_cast<std::size_t>(d)], S - d) << context;
        }
}

// W apart (F = B = W = 1) within ZB-H1's memory: the optimum is ZB-H1's makespan, whose bubble
// (S - 1)(F + B - W) is a third of 1F1B's (S - 1)(F + B + W).
TEST(PipelineOrder, FindsZeroBubbleH1sSmallerBubbleWithWeightsApart) {
  for (int S : {2, 3, 4})
    for (int m : {2 * S, 3 * S}) {
      const std::string context = fmt::format("S {} m {}", S, m);
      std::vector<int> peak;
      const double zb_h1 = template_makespan(plan::ScheduleKind::zb_h1, S, m, {}, &peak);
      std::vector<std::int64_t> caps(peak.begin(), peak.end());
      const PipelineOrder found = searched({.devices = S, .micro_batches = m, .split_backward = true, .memory_caps = caps});
      EXPECT_DOUBLE_EQ(found.evaluation.makespan, zb_h1) << context;
      EXPECT_DOUBLE_EQ(found.evaluation.makespan, 3 * m + (S - 1)) << context;
      EXPECT_LT(found.evaluation.makespan, (m + S - 1) * 3.0) << context;  // 1F1B's
      EXPECT_TRUE(found.solution.proven_optimal) << context;
      for (int d = 0; d < S; ++d)
        EXPECT_LE(found.evaluation.peak_held[static_cast<std::size_t>(d)], peak[static_cast<std::size_t>(d)]) << context;
    }
}

// Random 3F1B sizes (1-5 devices, 2-4 passes, 1-12 micro-batches) and costs: Table 7 and the order of
// every stream kept, 1F1B's memory, and never slower than the pilot search on the same costs.
TEST(PipelineOrder, ThreeFOneBKeepsTable7AndIsNoSlowerThanThePilot) {
  std::mt19937 rng(4);
  const auto pick = [&](int lo, int hi) { return std::uniform_int_distribution(lo, hi)(rng); };
  for (int i = 0; i < 30; ++i) {
    const int S = pick(1, 5), P = pick(2, 4), m = pick(1, 12);
    const plan::BlockCosts costs{static_cast<double>(pick(1, 3)), static_cast<double>(pick(1, 4)), 0.5 * pick(1, 4)};
    const std::string context = fmt::format("S {} P {} m {} F {} B {} W {}", S, P, m, costs.forward, costs.backward,
                                            costs.weight);
    const PipelineOrder found = searched({.devices = S, .passes = P, .micro_batches = m, .costs = costs, .table7 = true});
    EXPECT_EQ(join(plan::three_f_one_b_violations(found.devices, P, m), "; "), "") << context;
    const auto pilot = plan::search_three_f_one_b(S, P, m, costs);
    ASSERT_TRUE(pilot) << pilot.error().to_string();
    EXPECT_LE(found.evaluation.makespan, pilot->evaluation.makespan) << context;
    EXPECT_GE(found.evaluation.makespan * found.ticks_per_unit, static_cast<double>(found.solution.lower_bound))
        << context;
    EXPECT_DOUBLE_EQ(found.evaluation.makespan * found.ticks_per_unit, static_cast<double>(found.solution.makespan))
        << context;
    for (int d = 0; d < S; ++d) EXPECT_LE(found.evaluation.peak_held[static_cast<std::size_t>(d)], S - d) << context;
  }
}

// The acceptance size: 8 stages, AlphaFold2's 4 passes, 16 micro-batches, proven optimal (timed in
// bench/bench_order_search.cc, not here).
TEST(PipelineOrder, ThreeFOneBAtEightStages) {
  const PipelineOrder found = searched({.devices = 8, .passes = 4, .micro_batches = 16, .table7 = true});
  EXPECT_EQ(join(plan::three_f_one_b_violations(found.devices, 4, 16), "; "), "");
  EXPECT_TRUE(found.solution.proven_optimal);
  EXPECT_DOUBLE_EQ(found.evaluation.makespan, 7 * 3 + 16 * 6);  // (S - 1)(F + B) + m (P F + B)
}

TEST(PipelineOrder, RefusesABadShape) {
  const auto refused = [](const PipelineOrderShape& shape) {
    const auto r = pipeline_request(shape);
    return r ? std::string{} : r.error().message;
  };
  EXPECT_NE(refused({.devices = 0}).find("0 devices"), std::string::npos);
  EXPECT_NE(refused({.devices = 2, .costs = {1, -1, 1}}).find("not all above 0"), std::string::npos);
  EXPECT_NE(refused({.devices = 2, .memory_caps = {1}}).find("1 memory caps for 2 devices"), std::string::npos);
  // Half ticks: 10 per unit.
  const auto r = pipeline_request({.devices = 2, .costs = {1, 1, 0.5}});
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->ticks_per_unit, 10);
  EXPECT_EQ(r->request.blocks.back().duration, 15);
}

}  // namespace
}  // namespace loom::search
