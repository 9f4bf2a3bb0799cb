// The simulator agrees with the schedule evaluator (plan/schedule_eval.h) on a pipelined shrunk GPT whose
// blocks are given uniform durations: F = B = W = 1 per stage and micro-batch (a whole backward, 1F1B's,
// costs B + W = 2). The zero-bubble schedules' W blocks fill what 1F1B leaves idle.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <tuple>

#include "loom/ir/autograd.h"
#include "loom/plan/schedule_eval.h"
#include "loom/sim/simulator.h"
#include "testing/policy_plans.h"

namespace loom::sim {
namespace {

// The step of pp 2 over m micro-batches of shrunk GPT-3 125M. As in sim_policy_test's bubble(), only the
// sub-ops of one micro-batch (named "op[k/m]") have a duration: each block's budget divided evenly among
// its device's sub-ops of that block kind (forward, backward or whole backward, weight part).
double uniform_step(plan::ScheduleKind schedule, int m) {
  constexpr int p = 2;
  const auto job = exec::testing::policy_plan(exec::testing::shrunk_training_graph("gpt3-125m", ir::DType::f32), "pp",
                                              {.pp = p, .micro_batches = m, .schedule = schedule});
  const plan::Plan& plan = job->plan;
  const std::string part_of_m = "/" + std::to_string(m) + "]";
  const bool split = plan::splits_backward(schedule);
  // 0: forward, 1: backward (B, or whole), 2: weight part.
  const auto kind = [&](const plan::SubOp& s) -> int {
    const ir::Op& op = plan.graph->op(s.op);
    if (op.pass == ir::Pass::optimizer || op.type == "accumulate" || !s.name.ends_with(part_of_m)) return -1;
    if (op.pass == ir::Pass::forward) return 0;
    return ir::grad_part(op) == ir::GradPart::weight ? 2 : 1;
  };
  std::map<std::pair<int, int>, int> computes;  // by (device, kind)
  for (int d = 0; d < job->exec.num_devices; ++d)
    for (const auto& instruction : job->exec.programs[static_cast<std::size_t>(d)])
      if (const auto* c = std::get_if<exec::Compute>(&instruction))
        if (const int k = kind(plan.sub_op(c->sub_op)); k >= 0) ++computes[{d, k}];
  const Durations durations{
      .compute =
          [&](const plan::SubOp& s, int device) {
            const int k = kind(s);
            if (k < 0) return 0.0;
            const double block = k == 1 && !split ? 2.0 : 1.0;
            return block * m / computes.at({device, k});
          },
      .collective = [](const exec::Collective&, std::int64_t) { return 0.0; },
      .p2p = [](int, int, std::int64_t) { return 0.0; }};
  auto result = simulate(job->exec, durations);
  EXPECT_TRUE(result) << result.error().to_string();
  return result ? result->step_time : -1;
}

double evaluated(plan::ScheduleKind schedule, int m) {
  auto blocks = plan::schedule_blocks({.kind = schedule}, 2, m);
  EXPECT_TRUE(blocks);
  auto e = plan::evaluate_schedule(blocks.value_or(std::vector<std::vector<plan::Block>>{}), 2, m);
  EXPECT_TRUE(e) << e.error().to_string();
  return e ? e->makespan : -1;
}

TEST(SimulateZeroBubble, StepsMatchTheEvaluatorAndZeroBubbleIsShorter) {
  constexpr int m = 4;
  const double one = uniform_step(plan::ScheduleKind::one_f_one_b, m);
  const double h1 = uniform_step(plan::ScheduleKind::zb_h1, m);
  const double h2 = uniform_step(plan::ScheduleKind::zb_h2, m);
  EXPECT_NEAR(one, evaluated(plan::ScheduleKind::one_f_one_b, m), 1e-9);  // 3m + 3(p - 1) = 15
  EXPECT_NEAR(h1, evaluated(plan::ScheduleKind::zb_h1, m), 1e-9);         // 3m + (p - 1) = 13
  EXPECT_NEAR(h2, evaluated(plan::ScheduleKind::zb_h2, m), 1e-9);
  EXPECT_NEAR(one, 15, 1e-9);
  EXPECT_NEAR(h1, 13, 1e-9);
  EXPECT_LT(h1, one);
}

}  // namespace
}  // namespace loom::sim
