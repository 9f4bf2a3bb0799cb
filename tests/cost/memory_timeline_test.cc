// bytes_after_each_instruction against the hand-built plan's closed form and memory_usage's peaks.
#include "loom/cost/memory_timeline.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "../exec/exec_test_plans.h"
#include "testing/policy_plans.h"
#include "loom/cost/memory_model.h"

namespace loom::cost {
namespace {

// memory_model_test's HandBuiltDataParallelPeak, instruction by instruction.
TEST(MemoryTimeline, HandBuiltDataParallel) {
  const auto f = exec::testing::data_parallel(2);
  for (int d = 0; d < 2; ++d)
    EXPECT_EQ(bytes_after_each_instruction(f->exec, d), (std::vector<std::int64_t>{192, 448, 640, 448, 452, 644, 648, 456}));
}

// Its largest value and last value are memory_usage's peak and final bytes, on every device of shrunk
// policy plans.
TEST(MemoryTimeline, PeakIsMemoryUsagesPeak) {
  const ir::Graph& graph = exec::testing::shrunk_training_graph("gpt3-125m", ir::DType::bf16);
  const std::vector<std::pair<std::string, policy::ParallelConfig>> plans = {
      {"dp", {.dp = 2}}, {"dp-tp", {.dp = 2, .tp = 2}}, {"pp", {.pp = 2, .micro_batches = 4}}};
  for (const auto& [policy, config] : plans) {
    SCOPED_TRACE(policy);
    const auto p = exec::testing::policy_plan(graph, policy, config);
    const MemoryReport report = memory_usage(p->exec);
    for (int d = 0; d < p->exec.num_devices; ++d) {
      SCOPED_TRACE(d);
      const std::vector<std::int64_t> held = bytes_after_each_instruction(p->exec, d);
      ASSERT_EQ(held.size(), p->exec.programs[static_cast<std::size_t>(d)].size());
      const auto peak = std::ranges::max_element(held);
      EXPECT_EQ(*peak, report.devices[static_cast<std::size_t>(d)].peak_bytes);
      EXPECT_EQ(static_cast<std::size_t>(peak - held.begin()), report.devices[static_cast<std::size_t>(d)].peak_instruction);
      EXPECT_EQ(held.back(), report.devices[static_cast<std::size_t>(d)].final_bytes);
    }
  }
}

}  // namespace
}  // namespace loom::cost
