// Folded planning (exec/fold.h, api/job.h) against explicit plans of the same jobs: one micro-batch
// of one replica, repeated and mirrored, must predict what planning every sub-op predicts.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#include "loom/api/job.h"
#include "loom/exec/instruction_buffers.h"

namespace loom::api {
namespace {

struct FoldCase {
  std::string name;
  std::string cluster;
  policy::ParallelConfig config;
  std::int64_t batch;
};

JobOptions request_of(const FoldCase& job, Fold fold) {
  JobOptions r;
  r.model = "llama3-8b";
  r.layers = 8;
  r.seq = 512;
  r.global_batch = job.batch;
  r.cluster = job.cluster;
  r.policy = "megatron";
  r.fold = fold;
  return with_config(r, job.config);
}

std::unique_ptr<Job> plan_or_fail(const JobOptions& request) {
  auto result = plan_job(request);
  EXPECT_TRUE(result.has_value()) << (result ? "" : result.error().message);
  return result ? std::move(*result) : nullptr;
}

double relative(double a, double b) { return std::abs(a - b) / std::max(std::abs(b), 1e-30); }

const std::vector<FoldCase>& jobs() {
  using plan::ScheduleKind;
  static const std::vector<FoldCase> kJobs = {
      {"1f1b dp2 tp2 pp2 m4", "dgx-a100", {.dp = 2, .tp = 2, .pp = 2, .micro_batches = 4}, 16},
      {"1f1b dp2 tp2 pp4 m8", "dgx-a100x2", {.dp = 2, .tp = 2, .pp = 4, .micro_batches = 8}, 32},
      {"interleaved dp2 tp2 pp2 v2 m4", "dgx-a100",
       {.dp = 2, .tp = 2, .pp = 2, .micro_batches = 4, .virtual_stages = 2}, 16},
      {"accumulation dp4 tp2 m4 full recompute", "dgx-a100",
       {.dp = 4, .tp = 2, .pp = 1, .micro_batches = 4, .recompute = policy::Recompute::full}, 16},
      {"sp selective dp2 tp2 pp2 m4", "dgx-a100",
       {.dp = 2, .tp = 2, .pp = 2, .micro_batches = 4, .sequence_parallel = true,
        .recompute = policy::Recompute::selective},
       16},
      {"gpipe dp2 tp2 pp2 m4", "dgx-a100",
       {.dp = 2, .tp = 2, .pp = 2, .micro_batches = 4, .schedule = ScheduleKind::gpipe}, 16},
  };
  return kJobs;
}

// Step time within 10 % of the explicit plan (its order completion differs in detail; compute per device
// agrees to 1 %), the same model FLOPs, and peak memory at most 5 % above the explicit plan's and at most
// 15 % below: the fold keeps one running sum per weight gradient (as Megatron's main_grad buffer), each
// part added as soon as its block is done with it, where the explicit plan sums micro-batch partials
// pairwise as they arrive and may hold three at its peak.
void expect_predicts_alike(const Job& folded, const Job& explicit_plan) {
  EXPECT_LT(relative(folded.metrics.step_time, explicit_plan.metrics.step_time), 0.10)
      << "folded " << folded.metrics.step_time << " s, explicit " << explicit_plan.metrics.step_time << " s";
  EXPECT_LT(relative(folded.metrics.model_flops, explicit_plan.metrics.model_flops), 1e-9);
  const auto& fm = folded.memory.devices, &em = explicit_plan.memory.devices;
  ASSERT_EQ(fm.size(), em.size());
  for (std::size_t d = 0; d < fm.size(); ++d) {
    const double ratio = static_cast<double>(fm[d].peak_bytes) / static_cast<double>(em[d].peak_bytes);
    EXPECT_LT(ratio, 1.05) << "device " << d;
    EXPECT_GT(ratio, 0.85) << "device " << d;
    EXPECT_LT(relative(folded.sim.devices[d].compute, explicit_plan.sim.devices[d].compute), 0.01) << "device " << d;
  }
}

// The bounds above on megatron jobs, each step simulated once per device class.
TEST(Fold, PredictsWhatTheExplicitPlanPredicts) {
  for (const FoldCase& job : jobs()) {
    SCOPED_TRACE(job.name);
    const auto explicit_plan = plan_or_fail(request_of(job, Fold::off));
    const auto folded = plan_or_fail(request_of(job, Fold::on));
    ASSERT_TRUE(explicit_plan && folded);
    EXPECT_FALSE(explicit_plan->folded);
    EXPECT_TRUE(folded->folded);
    EXPECT_EQ(folded->exec.num_devices, 0);  // a folded job's step is its own type
    EXPECT_EQ(folded->step.step.num_devices, explicit_plan->exec.num_devices);
    EXPECT_EQ(folded->slice_devices, job.config.tp * job.config.pp);
    expect_predicts_alike(*folded, *explicit_plan);
    EXPECT_DOUBLE_EQ(folded->metrics.samples_per_second * folded->metrics.step_time,
                     static_cast<double>(job.batch));
    EXPECT_LT(folded->sim.simulated_devices.size(), folded->sim.devices.size());
  }
}

// The unfolded programs: every block once per micro-batch, the weight gradients accumulated and then
// all-reduced over the dp replicas (groups of dp devices, one per replica; bucketed by the exec passes
// into asynchronous starts, each waited for), images without programs.
TEST(Fold, RepeatsBlocksAndReducesOverReplicas) {
  const FoldCase job{"", "dgx-a100x2", {.dp = 4, .tp = 2, .pp = 2, .micro_batches = 8}, 64};
  const auto folded = plan_or_fail(request_of(job, Fold::on));
  ASSERT_TRUE(folded);
  const exec::ExecPlan& exec = folded->step.step;
  ASSERT_EQ(exec.class_of.size(), 16u);
  int with_program = 0;
  for (int d = 0; d < exec.num_devices; ++d) {
    const auto& program = exec.programs[static_cast<std::size_t>(d)];
    if (program.empty()) continue;
    ++with_program;
    std::map<std::string, int> runs;
    int dp_reductions = 0, starts = 0, waits = 0;
    for (const exec::Instruction& in : program) {
      if (const auto* c = std::get_if<exec::Compute>(&in)) ++runs[folded->plan.sub_op(c->sub_op).name];
      if (const auto c = exec::collective_call(in); c && c->group.size() == 4) {
        dp_reductions += static_cast<int>(c->inputs.size());
        starts += c->asynchronous;
        // The replicas of device d: stage-major numbering, tp innermost.
        for (std::size_t r = 1; r < c->group.size(); ++r) EXPECT_EQ(c->group[r] - c->group[r - 1], job.config.tp);
        EXPECT_EQ(std::ranges::count(c->group, d), 1);
      }
      waits += std::holds_alternative<exec::CollectiveWait>(in);
    }
    EXPECT_GT(dp_reductions, starts) << "device " << d;
    EXPECT_GT(starts, 0) << "device " << d;
    EXPECT_EQ(waits, starts) << "device " << d;
    for (const auto& [name, count] : runs) {
      const bool step = name.find(".adamw") != std::string::npos;
      EXPECT_EQ(count, step ? 1 : job.config.micro_batches) << name << " on device " << d;
    }
  }
  EXPECT_GT(with_program, 0);
  EXPECT_LT(with_program, exec.num_devices / 2);  // dp images have none
}

// ZeRO folds over micro-batches only: the slice keeps every dp replica (ZeRO's shards and collectives are
// among them), one micro-batch each. The same bounds as above against the explicit plan, for each stage
// (ZeRO-2's reduce-scatter per micro-batch, ZeRO-3's gathers per block), the zero policy and megatron with
// ZeRO over tp and a pipeline.
TEST(Fold, ZeroFoldsOverMicroBatchesAsTheExplicitPlanPredicts) {
  struct ZeroCase {
    std::string policy;
    FoldCase job;
  };
  const std::vector<ZeroCase> cases = {
      {"zero", {"zero-1 dp4 m4", "dgx-a100", {.dp = 4, .micro_batches = 4, .zero = 1}, 16}},
      {"zero", {"zero-2 dp4 m4", "dgx-a100", {.dp = 4, .micro_batches = 4, .zero = 2}, 16}},
      {"zero", {"zero-3 dp4 m4", "dgx-a100", {.dp = 4, .micro_batches = 4, .zero = 3}, 16}},
      {"zero", {"zero-3 dp4 m4 full recompute", "dgx-a100",
                {.dp = 4, .micro_batches = 4, .zero = 3, .recompute = policy::Recompute::full}, 16}},
      {"megatron", {"zero-2 dp2 tp2 pp2 m4", "dgx-a100", {.dp = 2, .tp = 2, .pp = 2, .micro_batches = 4, .zero = 2}, 16}},
  };
  for (const auto& [policy, job] : cases) {
    SCOPED_TRACE(job.name);
    JobOptions off = request_of(job, Fold::off), on = request_of(job, Fold::on);
    off.policy = on.policy = policy;
    const auto explicit_plan = plan_or_fail(off);
    const auto folded = plan_or_fail(on);
    ASSERT_TRUE(explicit_plan && folded);
    EXPECT_TRUE(folded->folded && folded->slice_keeps_replicas);
    EXPECT_EQ(folded->slice_devices, job.config.dp * job.config.tp * job.config.pp);
    EXPECT_EQ(folded->step.step.num_devices, explicit_plan->exec.num_devices);
    expect_predicts_alike(*folded, *explicit_plan);
    // Every compute but the optimizer steps once per micro-batch on the representatives.
    int reduce_scatters = 0;
    for (const auto& program : folded->step.step.programs)
      for (const exec::Instruction& in : program)
        if (const auto c = exec::collective_call(in); c && c->kind == comm::Primitive::reduce_scatter) ++reduce_scatters;
    int explicit_scatters = 0;
    for (int d : folded->step.step.representatives)
      for (const exec::Instruction& in : explicit_plan->exec.programs[static_cast<std::size_t>(d)])
        if (const auto c = exec::collective_call(in); c && c->kind == comm::Primitive::reduce_scatter) ++explicit_scatters;
    EXPECT_EQ(reduce_scatters, explicit_scatters);  // ZeRO-1 once a step, ZeRO-2 and -3 once per micro-batch
  }
}

TEST(Fold, RefusesWhatItCannotFold) {
  FoldCase job{"", "dgx-a100", {.dp = 2, .tp = 2, .pp = 2, .micro_batches = 4}, 16};
  JobOptions request = with_config(request_of(job, Fold::on), {.dp = 8, .micro_batches = 2, .zero = 3});
  request.policy = "zero";
  request.offload = exec::Offload::optimizer;
  auto offload = plan_job(request);
  ASSERT_FALSE(offload.has_value());
  EXPECT_NE(offload.error().message.find("ZeRO-Offload"), std::string::npos) << offload.error().message;

  request = request_of(job, Fold::on);
  request.schedule = plan::ScheduleKind::zb_h1;
  auto zero_bubble = plan_job(request);
  ASSERT_FALSE(zero_bubble.has_value());
  EXPECT_NE(zero_bubble.error().message.find("zb-h1"), std::string::npos) << zero_bubble.error().message;

  request = request_of(job, Fold::on);
  request.global_batch = 12;  // not a multiple of dp 2 x 4 micro-batches
  auto indivisible = plan_job(request);
  ASSERT_FALSE(indivisible.has_value());
  EXPECT_NE(indivisible.error().message.find("does not divide"), std::string::npos) << indivisible.error().message;
}

// GPT-3 175B on 1024 GPUs as Megatron-LM plans it (dp 8 x tp 8 x pp 16, 64 micro-batches, interleaved).
JobOptions gpt3_175b_on_1024(int zero) {
  JobOptions request;
  request.model = "gpt3-175b";
  request.global_batch = 512;
  request.cluster = "dgx-a100x128";
  request.policy = "megatron";
  return with_config(request, {.dp = 8, .tp = 8, .pp = 16, .micro_batches = 64, .virtual_stages = 2, .zero = zero});
}

// A job too large to plan explicitly that cannot fold is refused at once, naming the reason (ZeRO with
// ZeRO-Offload does not fold).
TEST(Fold, RefusesAnExplicitPlanTooLargeToBuild) {
  JobOptions request = gpt3_175b_on_1024(1);
  request.offload = exec::Offload::optimizer;
  auto refused = plan_job(request);
  ASSERT_FALSE(refused.has_value());
  EXPECT_NE(refused.error().message.find("cannot be folded"), std::string::npos) << refused.error().message;
  EXPECT_NE(refused.error().message.find("ZeRO-1"), std::string::npos) << refused.error().message;
}

// The explicit plan's memory is estimated before planning, under --fold off too (175B on 1024 GPUs unfolded
// climbed past 13 GB with no output in 600 s), and refused naming the option that avoids it.
TEST(Fold, FoldOffIsRefusedBeforePlanningWhenTheExplicitPlanIsTooLarge) {
  JobOptions request = gpt3_175b_on_1024(0);
  request.fold = Fold::off;
  auto refused = load_job(request);
  ASSERT_FALSE(refused.has_value());
  EXPECT_NE(refused.error().message.find("GiB to plan, over Loom's limit of 14.31 GiB; policy megatron is planned "
                                         "unfolded (--fold off)"),
            std::string::npos)
      << refused.error().message;
  EXPECT_TRUE(refused.error().hint.starts_with("drop --fold off")) << refused.error().hint;
}

// ZeRO's gathers and shards cost memory per data-parallel rank: ZeRO-3 on 512 GPUs (under the sub-op count
// that refuses a plain plan) is refused by its memory; where fewer micro-batches fit, the hint says how many.
TEST(Fold, ZeroPlansAreRefusedByTheirMemoryWithTheMicroBatchesThatFit) {
  JobOptions request;
  request.model = "gpt3-1.3b";
  request.cluster = "dgx-a100x64";
  request.policy = "zero";
  request.global_batch = 512;
  request = with_config(request, {.dp = 512, .micro_batches = 1, .zero = 3});
  auto refused = load_job(request);
  ASSERT_FALSE(refused.has_value());
  EXPECT_NE(refused.error().message.find("714240 sub-ops"), std::string::npos) << refused.error().message;
  EXPECT_NE(refused.error().message.find("policy zero with ZeRO-3 cannot be folded"), std::string::npos);
  EXPECT_TRUE(refused.error().hint.starts_with("plan fewer GPUs")) << refused.error().hint;

  request.cluster = "dgx-a100x8";
  request.global_batch = 4096;
  request = with_config(request, {.dp = 64, .micro_batches = 64, .zero = 3});
  auto fewer = load_job(request);
  ASSERT_FALSE(fewer.has_value());
  EXPECT_TRUE(fewer.error().hint.starts_with("plan --microbatches 18 or fewer")) << fewer.error().hint;
  request.global_batch = 64 * 18;
  request = with_config(request, {.dp = 64, .micro_batches = 18, .zero = 3});
  EXPECT_TRUE(load_job(request).has_value());  // the hint's count is under the limit
}

// automatic folds a job whose explicit plan would be large, and leaves a small one explicit.
TEST(Fold, AutomaticFoldsLargeJobsOnly) {
  const FoldCase small{"", "dgx-a100", {.dp = 2, .tp = 2, .pp = 2, .micro_batches = 4}, 16};
  const auto explicit_plan = plan_or_fail(request_of(small, Fold::automatic));
  ASSERT_TRUE(explicit_plan);
  EXPECT_FALSE(explicit_plan->folded);

  const FoldCase large{"", "dgx-a100x8", {.dp = 8, .tp = 8, .pp = 1, .micro_batches = 16}, 128};
  const auto folded = plan_or_fail(request_of(large, Fold::automatic));
  ASSERT_TRUE(folded);
  EXPECT_TRUE(folded->folded);
  EXPECT_EQ(folded->step.step.num_devices, 64);
}

}  // namespace
}  // namespace loom::api
