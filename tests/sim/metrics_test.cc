// step_metrics: MFU from the single-device graph's FLOPs (not the plan's), throughput, the per-device
// breakdown and the out-of-memory flag.
#include "loom/sim/metrics.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "loom/ir/graph_stats.h"
#include "sim_support.h"

namespace loom::sim {
namespace {

using ::testing::HasSubstr;

struct Simulated {
  std::unique_ptr<exec::testing::PolicyPlan> plan;
  std::unique_ptr<testing::Priced> model;
  SimResult sim;
  cost::MemoryReport memory;
};

Simulated run(std::string_view policy, const policy::ParallelConfig& config, ir::DType dtype = ir::DType::bf16) {
  Simulated r;
  r.plan = testing::classed_plan(policy, config, "gpt3-125m", dtype);
  r.model = testing::priced(r.plan->exec);
  auto sim = simulate(r.plan->exec, r.model->durations);
  EXPECT_TRUE(sim) << sim.error().to_string();
  if (sim) r.sim = std::move(*sim);
  r.memory = cost::memory_usage(r.plan->exec);
  return r;
}

TEST(StepMetrics, MfuCountsTheModelsFlopsOnce) {
  const ir::Graph& graph = exec::testing::shrunk_training_graph("gpt3-125m", ir::DType::bf16);
  auto stats = ir::compute_stats(graph, ops::builtin_ops());
  ASSERT_TRUE(stats) << stats.error().to_string();
  const double model_flops = stats->flops[0] + stats->flops[1];  // forward + backward, no optimizer
  for (const auto& [policy, config] : std::vector<std::pair<std::string, policy::ParallelConfig>>{
           {"dp", {.dp = 2}}, {"tp", {.tp = 2}}, {"dp-tp", {.dp = 2, .tp = 2}}}) {
    SCOPED_TRACE(policy);
    const Simulated r = run(policy, config);
    const cluster::GpuSpec& gpu = r.model->cluster.gpu;
    auto m = step_metrics(r.plan->exec, r.sim, r.memory, gpu, ops::builtin_ops(), {.samples_per_step = 4, .tokens_per_step = 32});
    ASSERT_TRUE(m) << m.error().to_string();
    EXPECT_DOUBLE_EQ(m->model_flops, model_flops);  // whatever the plan replicates
    EXPECT_EQ(m->precision, cluster::Precision::bf16);
    EXPECT_EQ(m->peak_flops, gpu.peak_bf16);
    EXPECT_EQ(m->devices, r.plan->exec.num_devices);
    EXPECT_EQ(m->step_time, r.sim.step_time);
    EXPECT_DOUBLE_EQ(m->mfu, model_flops / (r.sim.step_time * m->devices * gpu.peak_bf16));
    EXPECT_GT(m->mfu, 0);
    EXPECT_LT(m->mfu, 1);
    EXPECT_DOUBLE_EQ(m->samples_per_second, 4 / r.sim.step_time);
    EXPECT_DOUBLE_EQ(m->tokens_per_second, 32 / r.sim.step_time);
    ASSERT_EQ(m->per_device.size(), static_cast<std::size_t>(m->devices));
    for (const DeviceMetrics& d : m->per_device) {
      const auto i = static_cast<std::size_t>(d.device);
      EXPECT_EQ(d.compute, r.sim.devices[i].compute);
      EXPECT_EQ(d.exposed_communication, r.sim.devices[i].exposed_communication);
      EXPECT_EQ(d.idle, r.sim.devices[i].idle);
      EXPECT_EQ(d.peak_bytes, r.memory.devices[i].peak_bytes);
      EXPECT_EQ(d.at_peak, r.memory.devices[i].at_peak);
      EXPECT_FALSE(d.out_of_memory);
    }
    EXPECT_EQ(m->max_memory_device, r.memory.max_device());
    EXPECT_FALSE(m->out_of_memory());
    EXPECT_EQ(m->memory_capacity, gpu.memory_bytes);
  }
}

TEST(StepMetrics, Fp32ModelsUseTheFp32Peak) {
  const Simulated r = run("dp", {.dp = 2}, ir::DType::f32);
  auto m = step_metrics(r.plan->exec, r.sim, r.memory, r.model->cluster.gpu, ops::builtin_ops(), {});
  ASSERT_TRUE(m) << m.error().to_string();
  EXPECT_EQ(m->precision, cluster::Precision::fp32);
  EXPECT_EQ(m->peak_flops, r.model->cluster.gpu.peak_fp32);
  EXPECT_EQ(m->samples_per_second, 0);
}

TEST(StepMetrics, OutOfMemoryByDevice) {
  const Simulated r = run("dp", {.dp = 2});
  cluster::GpuSpec tiny = r.model->cluster.gpu;
  tiny.memory_bytes = r.memory.devices[0].peak_bytes - 1;
  auto m = step_metrics(r.plan->exec, r.sim, r.memory, tiny, ops::builtin_ops(), {});
  ASSERT_TRUE(m) << m.error().to_string();
  EXPECT_TRUE(m->out_of_memory());
  EXPECT_EQ(m->out_of_memory_devices, 2);
  EXPECT_TRUE(m->per_device[0].out_of_memory);
  tiny.memory_bytes = r.memory.devices[0].peak_bytes;  // exactly full fits
  EXPECT_FALSE(step_metrics(r.plan->exec, r.sim, r.memory, tiny, ops::builtin_ops(), {})->out_of_memory());
}

TEST(StepMetrics, RejectsMismatchedInputs) {
  const Simulated r = run("dp", {.dp = 2});
  cost::MemoryReport partial = r.memory;
  partial.devices.pop_back();
  auto m = step_metrics(r.plan->exec, r.sim, partial, r.model->cluster.gpu, ops::builtin_ops(), {});
  ASSERT_FALSE(m);
  EXPECT_THAT(m.error().message, HasSubstr("the memory report 1, but the plan has 2"));
  auto negative = step_metrics(r.plan->exec, r.sim, r.memory, r.model->cluster.gpu, ops::builtin_ops(), {.samples_per_step = -1});
  ASSERT_FALSE(negative);
  EXPECT_THAT(negative.error().hint, HasSubstr("0 or more"));
}

}  // namespace
}  // namespace loom::sim
