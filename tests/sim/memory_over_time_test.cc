// Memory over simulated time: program-order accounting at non-decreasing times, peak equal to
// memory_usage's on every device, in full and symmetric simulations; and the downsampler keeps the peak.
#include "loom/sim/memory_over_time.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "../exec/exec_test_plans.h"
#include "loom/cost/memory_model.h"
#include "sim_support.h"

namespace loom::sim {
namespace {

constexpr double kMs = 1e-3;

// data_parallel(2) with 1 ms computes and a 5 ms all-reduce: fc [0,1], loss [1,2], ones [2,3],
// all-reduce [3,8] (issued after ones). Loads at 0; the frees take the time reached so far.
TEST(MemoryOverTime, HandBuiltDataParallel) {
  auto f = exec::testing::data_parallel(2);
  auto result = simulate(f->exec, {.compute = [](const plan::SubOp&, int) { return 1 * kMs; },
                                   .collective = [](const exec::Collective&, std::int64_t) { return 5 * kMs; }});
  ASSERT_TRUE(result) << result.error().to_string();
  const std::vector<MemoryPoint> expected = {{0, 192},      {0, 448},      {0, 640},      {0, 448},
                                             {1 * kMs, 452}, {2 * kMs, 644}, {3 * kMs, 648}, {3 * kMs, 456}};
  for (int d = 0; d < 2; ++d) EXPECT_EQ(memory_over_time(f->exec, *result, d), expected);
}

TEST(MemoryOverTime, PeakIsMemoryUsagesOnPolicyPlans) {
  const std::vector<std::pair<std::string, policy::ParallelConfig>> plans = {
      {"dp", {.dp = 4}}, {"dp-tp", {.dp = 2, .tp = 2}}, {"pp", {.pp = 2, .micro_batches = 4}}};
  for (const auto& [policy, config] : plans) {
    SCOPED_TRACE(policy);
    const auto p = testing::classed_plan(policy, config);
    const auto model = testing::priced(p->exec);
    const cost::MemoryReport memory = cost::memory_usage(p->exec);
    for (bool classes : {true, false}) {
      auto result = simulate(p->exec, model->durations, {.use_device_classes = classes});
      ASSERT_TRUE(result) << result.error().to_string();
      for (int d = 0; d < p->exec.num_devices; ++d) {
        SCOPED_TRACE(d);
        const std::vector<MemoryPoint> series = memory_over_time(p->exec, *result, d);
        ASSERT_EQ(series.size(), p->exec.programs[static_cast<std::size_t>(d)].size());
        EXPECT_EQ(std::ranges::max(series, {}, &MemoryPoint::bytes).bytes, memory.devices[static_cast<std::size_t>(d)].peak_bytes);
        EXPECT_TRUE(std::ranges::is_sorted(series, {}, &MemoryPoint::time));
        EXPECT_LE(series.back().time, result->step_time);
        EXPECT_GT(series.back().time, 0);
      }
    }
  }
}

// Property: on random series the downsampled one is a subsequence of at most about max_points points
// with the same first, last, highest and lowest values.
TEST(MemoryOverTime, DownsampleKeepsTheEnvelope) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<MemoryPoint> series(std::uniform_int_distribution<std::size_t>(1, 5000)(rng));
    double t = 0;
    for (MemoryPoint& p : series) {
      t += std::uniform_real_distribution<double>(0, 1)(rng);
      p = {t, std::uniform_int_distribution<std::int64_t>(0, 1 << 30)(rng)};
    }
    const std::size_t max_points = std::uniform_int_distribution<std::size_t>(4, 600)(rng);
    const std::vector<MemoryPoint> small = downsample(series, max_points);
    SCOPED_TRACE(trial);
    EXPECT_LE(small.size(), std::max(max_points, series.size() <= max_points ? series.size() : 0));
    EXPECT_EQ(small.front(), series.front());
    EXPECT_EQ(small.back(), series.back());
    EXPECT_EQ(std::ranges::max(small, {}, &MemoryPoint::bytes).bytes, std::ranges::max(series, {}, &MemoryPoint::bytes).bytes);
    EXPECT_EQ(std::ranges::min(small, {}, &MemoryPoint::bytes).bytes, std::ranges::min(series, {}, &MemoryPoint::bytes).bytes);
    EXPECT_TRUE(std::ranges::includes(series, small, [](const MemoryPoint& a, const MemoryPoint& b) { return a.time < b.time; }));
  }
}

}  // namespace
}  // namespace loom::sim
