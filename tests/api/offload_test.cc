// ZeRO-Offload (exec/passes.h, offload_to_host) through the job pipeline: what leaves the GPU's memory,
// what the simulator charges for it, that the interpreter still computes the single-device step, and
// which jobs the option refuses.
#include <gtest/gtest.h>

#include <string>

#include "loom/api/job.h"
#include "loom/api/verify_job.h"
#include "loom/cost/memory_model.h"
#include "loom/exec/check.h"
#include "loom/exec/instruction_buffers.h"
#include "loom/sim/durations.h"

namespace loom::api {
namespace {

JobOptions zero_job(std::string model, int zero, exec::Offload offload, int gpus = 4) {
  JobOptions o;
  o.model = std::move(model);
  o.policy = "zero";
  o.zero = zero;
  o.gpus = gpus;
  o.dp = gpus;
  o.offload = offload;
  return o;
}

std::unique_ptr<Job> planned(const JobOptions& options) {
  auto job = plan_job(options);
  EXPECT_TRUE(job.has_value()) << (job ? "" : job.error().to_string());
  return job ? std::move(*job) : nullptr;
}

int count_copies(const exec::ExecPlan& exec, int device, exec::Memory to) {
  int n = 0;
  for (const exec::Instruction& in : exec.programs[static_cast<std::size_t>(device)])
    if (const auto* l = std::get_if<exec::Local>(&in); l != nullptr && l->kind == exec::LocalKind::copy)
      n += exec.buffer(l->output).memory == to;
  return n;
}

int count_steps(const exec::ExecPlan& exec, int device) {
  int n = 0;
  for (const exec::Instruction& in : exec.programs[static_cast<std::size_t>(device)])
    if (const auto* c = std::get_if<exec::Compute>(&in))
      n += exec.plan->op_of(c->sub_op).pass == ir::Pass::optimizer;
  return n;
}

// The optimizer states (fp32 master weights, Adam's two moments) leave the GPU, and so do the gradient
// shards already copied to the host when the peak comes (ZeRO-2 reduces them during the backward): with
// ZeRO-1 and 2 the GPU's peak drops by exactly those bytes. ZeRO-3 without offload peaks at the steps
// (every gradient shard and state held); offloaded, the steps hold nothing on the GPU and its peak moves
// into the backward, so it drops by at least the states. The host holds the states instead, and the GPU
// holds no optimizer state at its peak.
TEST(OffloadToHost, GpuPeakDropsByExactlyTheOffloadedStates) {
  for (const int zero : {1, 2, 3}) {
    SCOPED_TRACE(zero);
    JobOptions options = zero_job("gpt3-125m", zero, exec::Offload::none);
    options.layers = 2;
    options.seq = 256;
    options.global_batch = 8;
    const auto on_gpu = planned(options);
    options.offload = exec::Offload::optimizer;
    const auto offloaded = planned(options);
    ASSERT_TRUE(on_gpu && offloaded);
    for (int d = 0; d < 4; ++d) {
      const cost::DeviceMemory& before = on_gpu->memory.devices[static_cast<std::size_t>(d)];
      const cost::DeviceMemory& after = offloaded->memory.devices[static_cast<std::size_t>(d)];
      const std::int64_t states = before.model_state.optimizer_state_bytes;
      ASSERT_GT(states, 0);
      EXPECT_EQ(before.at_peak[ir::TensorRole::optimizer_state], states);
      EXPECT_EQ(after.at_peak[ir::TensorRole::optimizer_state], 0);
      EXPECT_EQ(after.model_state.optimizer_state_bytes, 0);
      const std::int64_t moved_gradients =
          before.at_peak[ir::TensorRole::gradient] - after.at_peak[ir::TensorRole::gradient];
      EXPECT_GE(moved_gradients, 0);
      if (zero == 1) {
        EXPECT_EQ(moved_gradients, 0);  // reduced only when the steps read them, after the peak
      }
      if (zero < 3) {
        EXPECT_EQ(before.peak_bytes - after.peak_bytes, states + moved_gradients);
      } else {
        EXPECT_GE(before.peak_bytes - after.peak_bytes, states);
      }
      EXPECT_GE(after.host_peak_bytes, states);
      EXPECT_EQ(before.host_peak_bytes, 0);
    }
  }
}

// GPT-3 6.7B on 2 of a DGX-1's V100-32GB with ZeRO-3 holds 16 bytes per parameter over 2 ranks, 54 GB of
// model state per GPU: it does not fit; offloaded, 2 bytes per parameter stay, and it does. With the
// parameters offloaded too, the GPU keeps no parameter shard across steps.
TEST(OffloadToHost, AModelOverCapacityWithZero3FitsWithOffload) {
  JobOptions options = zero_job("gpt3-6.7b", 3, exec::Offload::none, 2);
  options.cluster = "dgx1";
  options.global_batch = 4;
  options.seq = 1024;
  options.recompute = policy::Recompute::full;
  const auto on_gpu = planned(options);
  options.offload = exec::Offload::optimizer;
  const auto offloaded = planned(options);
  options.offload = exec::Offload::optimizer_and_params;
  const auto params = planned(options);
  ASSERT_TRUE(on_gpu && offloaded && params);
  EXPECT_FALSE(cost::check_fits(on_gpu->memory, on_gpu->cluster.gpu).has_value());
  EXPECT_TRUE(cost::check_fits(offloaded->memory, offloaded->cluster.gpu).has_value());
  EXPECT_TRUE(cost::check_fits(params->memory, params->cluster.gpu).has_value());
  const cost::DeviceMemory& d = params->memory.devices.front();
  EXPECT_EQ(d.model_state.parameter_bytes, 0);
  EXPECT_LT(d.peak_bytes, offloaded->memory.devices.front().peak_bytes);
  EXPECT_LE(d.host_peak_bytes * params->cluster.gpus_per_node, params->cluster.host.memory_bytes);
}

// With every other duration zero, the step is the offload alone, hand-computed: one PCIe stream per GPU
// runs each gradient's copy to the host and each updated shard's copy back, one after another (c each:
// 2 N c for N steps), and the host runs the N steps one after another (h each: N h).
TEST(OffloadToHost, StepGrowsByTheCopiesAndTheHostSteps) {
  JobOptions options = zero_job("gpt3-125m", 3, exec::Offload::optimizer, 2);
  options.shrink = true;
  options.layers = 2;
  options.global_batch = 4;
  const auto job = planned(options);
  ASSERT_TRUE(job);
  const int steps = count_steps(job->exec, 0);
  ASSERT_GT(steps, 4);
  EXPECT_EQ(count_copies(job->exec, 0, exec::Memory::host), steps);  // one gradient shard each
  EXPECT_EQ(count_copies(job->exec, 0, exec::Memory::gpu), steps);    // one updated shard each
  const auto durations = [](double copy, double host) {
    sim::Durations d;
    d.compute = [](const plan::SubOp&, int) { return 0.0; };
    d.collective = [](const exec::Collective&, std::int64_t) { return 0.0; };
    d.p2p = [](int, int, std::int64_t) { return 0.0; };
    d.copy = [copy](std::int64_t, int) { return copy; };
    d.host_compute = [host](const plan::SubOp&, int) { return host; };
    return d;
  };
  const auto copies_only = sim::simulate(job->exec, durations(0.25, 0));
  const auto host_only = sim::simulate(job->exec, durations(0, 0.5));
  ASSERT_TRUE(copies_only && host_only);
  EXPECT_DOUBLE_EQ(copies_only->step_time, 2 * steps * 0.25);
  EXPECT_DOUBLE_EQ(host_only->step_time, steps * 0.5);
  EXPECT_DOUBLE_EQ(host_only->devices.front().host, steps * 0.5);
}

// The model's prices: a copy at the GPU's share of its PCIe switch (a DGX-1: 12 GB/s shared by 2 GPUs),
// a step at the GPU's share of its node's CPU Adam throughput (8 GPUs).
TEST(OffloadToHost, ModelDurationsPriceCopiesOnThePcieShareAndStepsOnTheHostShare) {
  JobOptions options = zero_job("gpt3-125m", 3, exec::Offload::optimizer, 2);
  options.shrink = true;
  options.layers = 1;
  options.cluster = "dgx1";
  const auto job = planned(options);
  ASSERT_TRUE(job);
  auto compute = cost::ComputeModel::make(job->plan, job->catalog, job->cluster.gpu);
  ASSERT_TRUE(compute);
  auto durations = sim::model_durations(job->exec, *compute, job->cluster);
  ASSERT_TRUE(durations);
  const double launch = compute->constants().launch_seconds;
  EXPECT_DOUBLE_EQ(durations->copy(6'000'000, 0), launch + 6e6 / (12e9 / 2));
  for (const exec::Instruction& in : job->exec.programs.front()) {
    if (!exec::runs_on_host(job->exec, in)) continue;
    const plan::SubOp& step = job->plan.sub_op(std::get<exec::Compute>(in).sub_op);
    const double params = static_cast<double>(step.outputs.front().numel());
    EXPECT_DOUBLE_EQ(durations->host_compute(step, 0), params / (job->cluster.host.cpu_adam_params_per_second / 8));
  }
}

// A copy is the identity: the offloaded step computes what one device computes, and ends where the next
// step loads (fp32, shrunk presets; both modes; ZeRO-1 to 3).
TEST(OffloadToHost, VerifiesOnShrunkPresets) {
  struct Case {
    std::string model;
    int zero;
    exec::Offload offload;
    ir::DType dtype = ir::DType::f32;  // bf16: fp32 master weights, the step reads no 16-bit parameter
  };
  for (const Case& c : {Case{"gpt3-125m", 3, exec::Offload::optimizer_and_params},
                        Case{"gpt3-125m", 2, exec::Offload::optimizer, ir::DType::bf16},
                        Case{"gpt3-125m", 1, exec::Offload::optimizer}, Case{"gpt3-125m", 3, exec::Offload::optimizer, ir::DType::bf16},
                        Case{"t5-3.9b", 3, exec::Offload::optimizer}, Case{"t5-3.9b", 3, exec::Offload::optimizer_and_params},
                        Case{"swin-1.8b", 3, exec::Offload::optimizer_and_params}}) {
    SCOPED_TRACE(c.model + " ZeRO-" + std::to_string(c.zero) + " " + std::string(exec::name(c.offload)));
    JobOptions options = zero_job(c.model, c.zero, c.offload, 2);
    options.shrink = true;
    options.layers = c.model.starts_with("swin") ? 4 : 2;  // Swin's stages need 4
    options.dtype = c.dtype;
    options.global_batch = 4;
    auto job = load_job(options);
    ASSERT_TRUE(job) << job.error().to_string();
    ASSERT_TRUE(apply_policy(**job));
    const auto made = materialize(**job);
    ASSERT_TRUE(made) << made.error().to_string();
    EXPECT_GT((*job)->passes.host_steps, 0);
    const auto report = verify_job(**job, 7);
    ASSERT_TRUE(report) << report.error().to_string();
    EXPECT_LT(report->worst(), 1e-9);
  }
}

TEST(OffloadToHost, RefusesPlansWithoutTheZeroStageItNeeds) {
  const auto refused = [](JobOptions o, std::string_view says) {
    o.shrink = true;
    auto job = plan_job(o);
    ASSERT_FALSE(job);
    EXPECT_NE(job.error().message.find(says), std::string::npos) << job.error().message;
  };
  refused(zero_job("gpt3-125m", 2, exec::Offload::optimizer_and_params), "needs ZeRO-3");
  JobOptions dp = zero_job("gpt3-125m", 0, exec::Offload::optimizer);
  dp.policy = "megatron";
  refused(dp, "needs ZeRO");
  dp.policy = "dp";
  refused(dp, "needs the policy megatron or zero");
  EXPECT_FALSE(exec::parse_offload("params"));
  EXPECT_EQ(exec::parse_offload("optimizer+params").value(), exec::Offload::optimizer_and_params);
}

}  // namespace
}  // namespace loom::api
