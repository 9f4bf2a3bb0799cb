// Multi-group steps (exec::CollectiveInfo::step) through the job pipeline: the layout search's concurrent
// groups across nodes share the nodes' NICs in the simulator (sim/durations.h), and the folded step
// (exec/fold.h) keeps them, its slice's steps mapped to the full devices, so it predicts what the explicit
// plan predicts.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "loom/api/job.h"
#include "loom/sim/durations.h"
#include "../temp_path.h"

namespace loom::api {
namespace {

namespace fs = std::filesystem;

// Two nodes of two H100s and one 50 GB/s NIC each, so that two concurrent pairs across them share it.
std::string two_by_two_one_nic() {
  const fs::path file = loom::testing::process_temp_path("loom_fold_group_steps_2x2", ".yaml");
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
// all-gather), and tp 2 in a node with dp 2 across them (each gradient's two pieces reduced by two pairs
// at once, one layout search per piece in the explicit plan, joined: exec/concurrent_steps.h): folded and
// explicit, the pairs are priced sharing the node's NIC, both steps are slower than with every pair priced
// alone, and the two predict one step.
TEST(FoldGroupSteps, FoldedAndExplicitPlansPriceConcurrentGroupsAlike) {
  const std::vector<policy::ParallelConfig> configs = {
      {.dp = 1, .tp = 4, .micro_batches = 2},
      {.dp = 2, .tp = 2, .micro_batches = 2},
  };
  for (const policy::ParallelConfig& config : configs) {
    SCOPED_TRACE("tp " + std::to_string(config.tp) + " dp " + std::to_string(config.dp));
    const auto explicit_plan = plan_or_fail(request_of(config, Fold::off));
    const auto folded = plan_or_fail(request_of(config, Fold::on));
    ASSERT_TRUE(explicit_plan && folded);
    ASSERT_TRUE(folded->folded);
    EXPECT_GT(grouped_collectives(explicit_plan->exec), 0);
    EXPECT_GT(grouped_collectives(folded->step.step), 0);
    const double explicit_step = explicit_plan->metrics.step_time, folded_step = folded->metrics.step_time;
    EXPECT_LT(relative(folded_step, explicit_step), 0.01) << "folded " << folded_step << " s, explicit "
                                                          << explicit_step << " s";
    const double explicit_alone = step_priced_alone(*explicit_plan), folded_alone = step_priced_alone(*folded);
    EXPECT_GT(explicit_step, explicit_alone * 1.01) << "priced alone " << explicit_alone << " s";
    EXPECT_GT(folded_step, folded_alone * 1.01) << "priced alone " << folded_alone << " s";
  }
}

// By weight gradient: the groups of its all-reduces over the dp replicas in `exec` (the pairs crossing the
// nodes), each with the step it is priced with and the simulator's price.
struct Reduction {
  std::vector<int> group;
  std::int64_t step = -1;
  double seconds = 0;
  comm::Step alone;  // its own comm::Step (the group alone at its S)
};
std::map<std::string, std::vector<Reduction>> dp_reductions(const Job& job, const exec::ExecPlan& exec) {
  auto compute = cost::ComputeModel::make(job.plan, job.catalog, job.cluster.gpu, nullptr);
  EXPECT_TRUE(compute);
  auto durations = sim::model_durations(exec, *compute, job.cluster, {.contention = job.cluster.comm_contention});
  EXPECT_TRUE(durations);
  std::map<std::string, std::vector<Reduction>> by_gradient;
  if (!compute || !durations) return by_gradient;
  const ir::Graph& graph = *job.plan.graph;
  for (const auto& program : exec.programs)
    for (const exec::Instruction& in : program) {
      const auto* c = std::get_if<exec::Collective>(&in);
      if (c == nullptr || c->kind != comm::Primitive::all_reduce) continue;
      const ir::FullTensor& t = graph.tensor(exec.collectives[static_cast<std::size_t>(c->tag)].tensor);
      if (t.role != ir::TensorRole::gradient || !t.owner.valid() || graph.tensor(t.owner).role != ir::TensorRole::parameter)
        continue;
      std::vector<int> group = c->group;
      std::ranges::sort(group);
      auto& reductions = by_gradient[t.name];
      if (std::ranges::any_of(reductions, [&](const Reduction& r) { return r.group == group; })) continue;
      const std::int64_t bytes = exec.buffer(c->input).bytes;
      reductions.push_back({group, sim::priced_step(exec, *c), durations->collective(*c, bytes),
                            sim::collective_step(exec, *c, bytes)});
    }
  return by_gradient;
}

// DpReductionsOfTpPiecesArePricedAsOneStep's checks, on at least `at_least` split gradients.
void expect_dp_reductions_priced_as_one_step(const JobOptions& explicit_request, const JobOptions& folded_request,
                                             int at_least) {
  const auto explicit_plan = plan_or_fail(explicit_request);
  const auto folded = plan_or_fail(folded_request);
  ASSERT_TRUE(explicit_plan && folded);
  ASSERT_TRUE(folded->folded);
  const auto explicit_reductions = dp_reductions(*explicit_plan, explicit_plan->exec);
  const auto folded_reductions = dp_reductions(*folded, folded->step.step);
  const comm::AlphaBetaCostModel model(explicit_plan->cluster);
  const std::vector<std::vector<int>> pairs = {{0, 2}, {1, 3}};
  int split = 0, folded_checked = 0;
  for (const auto& [gradient, reductions] : explicit_reductions) {
    SCOPED_TRACE(gradient);
    if (reductions.size() != 2) continue;
    ++split;
    for (const Reduction& r : reductions) {
      ASSERT_GE(r.step, 0) << "pair " << r.group[0] << "/" << r.group[1] << " priced alone";
      EXPECT_EQ(explicit_plan->exec.group_steps[static_cast<std::size_t>(r.step)], pairs);
      comm::Step both = r.alone;
      both.groups = pairs;
      EXPECT_DOUBLE_EQ(r.seconds, model.step_time(both));
      if (r.alone.buffer_bytes >= (1 << 20)) {  // a norm's 8 KiB is latency: sharing the NIC costs nothing
        EXPECT_GT(r.seconds, model.step_time(r.alone) * 1.01) << "a pair priced alone";
      }
    }
    const auto folded_of = folded_reductions.find(gradient);
    ASSERT_NE(folded_of, folded_reductions.end());
    for (const Reduction& f : folded_of->second) {
      ASSERT_GE(f.step, 0) << "folded pair " << f.group[0] << "/" << f.group[1] << " priced alone";
      EXPECT_EQ(folded->step.step.group_steps[static_cast<std::size_t>(f.step)], pairs);
      const auto same = std::ranges::find(reductions, f.group, &Reduction::group);
      ASSERT_NE(same, reductions.end());
      EXPECT_DOUBLE_EQ(f.seconds, same->seconds) << "folded and explicit price alike";
      ++folded_checked;
    }
  }
  EXPECT_GE(split, at_least);
  EXPECT_GE(folded_checked, at_least);
}

// tp 2 in each node, dp 2 across the two nodes (one NIC each): each tp-split weight's gradient is reduced
// by two pairs {0, 2} and {1, 3}, one layout search per piece in the explicit plan (a norm's, which tp
// replicates, by one search of both pairs). Both pairs are priced
// as one step of both groups, exactly one comm::Step of the two pairs (the two pieces' bytes over each
// node's NIC), slower than a pair alone; the folded plan's reductions (its representatives') are priced
// the same. Without the exec passes (the searches' all-reduces; the 4 MiB k and v pieces are exchanged by
// sends, priced as sends), and with them but no buckets (every gradient its own all-reduce; the k and v
// exchanges made all-reduces by exchange_to_all_reduce, which keep their sends' joined step).
TEST(FoldGroupSteps, DpReductionsOfTpPiecesArePricedAsOneStep) {
  for (const bool passes : {false, true}) {
    SCOPED_TRACE(passes ? "exec passes, no buckets" : "no exec passes");
    const policy::ParallelConfig config{.dp = 2, .tp = 2, .micro_batches = 2};
    JobOptions explicit_request = request_of(config, Fold::off), folded_request = request_of(config, Fold::on);
    explicit_request.exec_passes = folded_request.exec_passes = passes;
    explicit_request.bucket_cap_mb = folded_request.bucket_cap_mb = 0;
    expect_dp_reductions_priced_as_one_step(explicit_request, folded_request, passes ? 16 : 12);
  }
}

}  // namespace
}  // namespace loom::api

