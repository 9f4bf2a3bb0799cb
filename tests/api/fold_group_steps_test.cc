// Multi-group steps (exec::CollectiveInfo::step) through the job pipeline: the layout search's concurrent
// groups across nodes share the nodes' NICs in the simulator (sim/durations.h), and the folded step
// (exec/fold.h) keeps them, its slice's steps mapped to the full devices, so it predicts what the explicit
// plan predicts.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>

#include "loom/api/job.h"
#include "loom/sim/durations.h"

namespace loom::api {
namespace {

namespace fs = std::filesystem;

// Two nodes of two H100s and one 50 GB/s NIC each, so that two concurrent pairs across them share it.
std::string two_by_two_one_nic() {
  const fs::path file = fs::temp_directory_path() / "loom_fold_group_steps_2x2.yaml";
  std::ofstream(file) << "name: \"h100-2x2-nic1\"\nnodes: 2\ngpus_per_node: 2\ngpu:\n  name: \"H100\"\n"
                      << "  peak_bf16: 989e12\n  peak_fp16: 989e12\n  peak_fp32: 67e12\n  memory_bytes: 85899345920\n"
                      << "  memory_bandwidth: 3.35e12\nintra:\n  kind: nvswitch\n  bandwidth: 450e9\n  latency: 1e-6\n"
                      << "inter:\n  kind: infiniband\n  bandwidth: 25e9\n  latency: 5e-6\n"
                      << "nics_per_node: 1\nnic_bandwidth: 50e9\n";
  return file.string();
}

JobOptions request_of(const policy::ParallelConfig& config, Fold fold) {
  JobOptions r;
  r.model = "llama3-8b";
  r.layers = 2;
  r.seq = 256;
  r.cluster = two_by_two_one_nic();
  r.policy = "megatron";
  r.fold = fold;
  r.global_batch = std::int64_t{config.dp} * config.micro_batches;
  return with_config(r, config);
}

std::unique_ptr<Job> plan_or_fail(const JobOptions& request) {
  auto result = plan_job(request);
  EXPECT_TRUE(result.has_value()) << (result ? "" : result.error().message);
  return result ? std::move(*result) : nullptr;
}

double relative(double a, double b) { return std::abs(a - b) / std::max(std::abs(b), 1e-30); }

// Collectives and starts of the job's step programs that are one group of a multi-group step.
int grouped_collectives(const exec::ExecPlan& exec) {
  int n = 0;
  for (const auto& program : exec.programs)
    for (const exec::Instruction& in : program)
      if (const auto c = exec::collective_call(in))
        n += exec.collectives[static_cast<std::size_t>(c->tag)].step >= 0 ? 1 : 0;
  return n;
}

// The job's step simulated with every collective priced alone (its group steps forgotten), as before.
double step_priced_alone(const Job& job) {
  exec::ExecPlan alone = step_programs(job);
  for (exec::CollectiveInfo& info : alone.collectives) info.step = -1;
  auto compute = cost::ComputeModel::make(job.plan, job.catalog, job.cluster.gpu, nullptr);
  EXPECT_TRUE(compute);
  auto durations = sim::model_durations(alone, *compute, job.cluster, {.contention = job.cluster.comm_contention});
  EXPECT_TRUE(durations);
  auto result = job.folded ? sim::simulate(exec::FoldedStep{std::move(alone), job.step.shape}, *durations)
                           : sim::simulate(alone, *durations);
  EXPECT_TRUE(result) << (result ? "" : result.error().message);
  return result ? result->step_time : 0;
}

// tp 4 over two nodes (each all-reduce: a reduce-scatter in each node, two pairs across them, an
// all-gather): folded and explicit, the pairs are priced sharing the node's NIC, both steps are slower than
// with every pair priced alone, and the two predict one step. tp 2 in a node with dp 2 across them: each
// gradient piece's reduction over the replicas is its own step in both (exec/fold.cc, reduce_over_replicas),
// so again one step.
TEST(FoldGroupSteps, FoldedAndExplicitPlansPriceConcurrentGroupsAlike) {
  const std::vector<std::pair<policy::ParallelConfig, bool>> configs = {
      {{.dp = 1, .tp = 4, .micro_batches = 2}, true},
      {{.dp = 2, .tp = 2, .micro_batches = 2}, false},
  };
  for (const auto& [config, across_nodes] : configs) {
    SCOPED_TRACE("tp " + std::to_string(config.tp) + " dp " + std::to_string(config.dp));
    const auto explicit_plan = plan_or_fail(request_of(config, Fold::off));
    const auto folded = plan_or_fail(request_of(config, Fold::on));
    ASSERT_TRUE(explicit_plan && folded);
    ASSERT_TRUE(folded->folded);
    const double explicit_step = explicit_plan->metrics.step_time, folded_step = folded->metrics.step_time;
    EXPECT_LT(relative(folded_step, explicit_step), 0.01) << "folded " << folded_step << " s, explicit "
                                                          << explicit_step << " s";
    if (!across_nodes) continue;
    EXPECT_GT(grouped_collectives(explicit_plan->exec), 0);
    EXPECT_GT(grouped_collectives(folded->step.step), 0);
    const double explicit_alone = step_priced_alone(*explicit_plan), folded_alone = step_priced_alone(*folded);
    EXPECT_GT(explicit_step, explicit_alone * 1.01) << "priced alone " << explicit_alone << " s";
    EXPECT_GT(folded_step, folded_alone * 1.01) << "priced alone " << folded_alone << " s";
  }
}

}  // namespace
}  // namespace loom::api
