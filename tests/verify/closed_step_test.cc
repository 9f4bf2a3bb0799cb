// Property: every materialized plan closes its step (verify/closed_step.h). The random graphs and plans
// of random_plans.h, each persistent tensor and final gradient given a random residence
// (plan/residence.h), are materialized, run, and must match the single-device run in every tensor and
// end the step with every loaded piece of what the step updates, equal to the single-device update. A
// planted fault (a closed piece freed at the end) must be named.
#include "loom/verify/closed_step.h"

#include <gtest/gtest.h>

#include "loom/cluster/presets.h"
#include "loom/exec/check.h"
#include "loom/exec/materialize.h"
#include "loom/plan/residence.h"
#include "random_plans.h"

namespace loom::verify {
namespace {

constexpr std::uint64_t kBaseSeed = 20251122;
constexpr int kCases = 1000;
constexpr double kTolerance = 1e-9;

// Residences drawn per tensor: optimizer_shards with probability one half, for parameters, optimizer
// states and final gradients alike. Returns how many were set.
int random_residences(plan::Plan& plan, testing::Rng& rng) {
  const ir::Graph& graph = *plan.graph;
  int set = 0;
  for (const ir::FullTensor& t : graph.tensors) {
    const bool persistent = plan::persists(graph, t.id) && plan::updated_version(graph, t.id).valid();
    const bool gradient = t.role == ir::TensorRole::gradient && t.owner.valid() &&
                          plan::final_gradient(graph, t.owner) == t.id;
    if ((persistent || gradient) && rng.chance(0.5)) {
      EXPECT_TRUE(plan::set_residence(plan, t.id, plan::Residence::optimizer_shards));
      ++set;
    }
  }
  return set;
}

exec::MaterializeOptions options_for(std::uint64_t seed) {
  exec::MaterializeOptions options;
  if (seed % 2 == 0) {
    auto cluster = cluster::make_cluster("dgx-a100");
    EXPECT_TRUE(cluster);
    if (cluster) options.cost_model = exec::bandwidth_only_cost(*cluster);
  } else if (seed % 4 == 1) {
    options.use_layout_search = false;
  }
  return options;
}

// Empty when the ExecPlan runs, matches the reference and closes its step.
std::string problem_with(const exec::ExecPlan& exec, const testing::RandomCase& c, std::size_t& closed) {
  if (auto checked = exec::check_exec_plan(exec); !checked) return "check_exec_plan: " + checked.error().to_string();
  auto run = run_exec_plan(exec, c.initial);
  if (!run) return "run_exec_plan: " + run.error().to_string();
  if (std::string d = testing::disagreement(*c.graph, c.reference, run->values, kTolerance); !d.empty()) return d;
  auto close = check_closed_step(exec, *run, c.reference);
  if (!close) return "check_closed_step: " + close.error().to_string();
  if (close->error.max_rel > kTolerance)
    return fmt::format("'{}' ends the step off by rel {:.3g}", close->error.worst, close->error.max_rel);
  closed += close->pieces;
  return {};
}

TEST(ClosedStepProperty, EveryResidenceOfEveryRandomPlanClosesTheStep) {
  int failures = 0, residences = 0, multi_device = 0;
  std::size_t closed = 0;
  for (int i = 0; i < kCases; ++i) {
    const std::uint64_t seed = kBaseSeed + static_cast<std::uint64_t>(i);
    auto c = testing::random_case(seed, /*structured=*/true);
    ASSERT_TRUE(c) << c.error().to_string();
    testing::Rng rng(seed ^ 0x5eed);
    residences += random_residences(c->plan, rng);
    multi_device += c->devices > 1 ? 1 : 0;
    std::string problem;
    auto m = exec::materialize(c->plan, c->devices, options_for(seed));
    if (!m) problem = "materialize: " + m.error().to_string();
    else problem = problem_with(m->exec, *c, closed);
    if (problem.empty()) continue;
    if (++failures <= 3) ADD_FAILURE() << "case " << i << ": " << problem << "\n" << c->describe() << (m ? testing::programs_text(m->exec) : "");
  }
  EXPECT_EQ(failures, 0) << "of " << kCases;
  EXPECT_GT(residences, kCases);          // not vacuous: most cases shard something
  EXPECT_GT(multi_device, kCases / 2);
  EXPECT_GT(closed, static_cast<std::size_t>(kCases));
}

TEST(ClosedStep, NamesAPieceTheStepDoesNotEndWith) {
  // The first random graph data parallelism applies to.
  Expected<testing::RandomCase> c = fail("none");
  Expected<plan::Plan> dp = fail("none");
  for (std::uint64_t seed = kBaseSeed; !dp && seed < kBaseSeed + 100; ++seed) {
    c = testing::random_case(seed, /*structured=*/false);
    ASSERT_TRUE(c) << c.error().to_string();
    dp = testing::data_parallel(*c->graph, 2);
  }
  ASSERT_TRUE(dp) << dp.error().to_string();
  auto m = exec::materialize(*dp, 2);
  ASSERT_TRUE(m) << m.error().to_string();
  auto run = run_exec_plan(m->exec, c->initial);
  ASSERT_TRUE(run) << run.error().to_string();
  auto closed = check_closed_step(m->exec, *run, c->reference);
  ASSERT_TRUE(closed) << closed.error().to_string();
  EXPECT_GT(closed->pieces, 0u);
  EXPECT_EQ(closed->error.max_rel, 0.0);
  // Device 1 frees its updated parameters at the end: its next step would have nothing to load.
  exec::ExecPlan faulty = m->exec;
  for (std::size_t b = 0; b < faulty.buffers.size(); ++b) {
    const exec::Buffer& buffer = faulty.buffers[b];
    if (buffer.device == 1 && c->graph->tensor(buffer.piece.tensor).updates.valid() &&
        c->graph->tensor(buffer.piece.tensor).role == ir::TensorRole::parameter)
      faulty.programs[1].push_back(exec::Free{exec::BufferId(static_cast<std::uint32_t>(b))});
  }
  auto faulty_run = run_exec_plan(faulty, c->initial);
  ASSERT_TRUE(faulty_run) << faulty_run.error().to_string();
  auto refused = check_closed_step(faulty, *faulty_run, c->reference);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("device 1 loads"), std::string::npos) << refused.error().message;
  EXPECT_NE(refused.error().message.find(".updated'"), std::string::npos) << refused.error().message;
  // A step that ends with wrong values is measured, not accepted.
  std::vector<NdArray> wrong = c->reference;
  for (const ir::FullTensor& t : c->graph->tensors)
    if (t.updates.valid())
      for (double& v : wrong[t.id.index()].data) v += 1;
  auto off = check_closed_step(m->exec, *run, wrong);
  ASSERT_TRUE(off);
  EXPECT_GT(off->error.max_rel, 1e-3);
  EXPECT_NE(off->error.worst.find(".updated"), std::string::npos);
}

}  // namespace
}  // namespace loom::verify
