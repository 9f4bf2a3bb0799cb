// The simulated bubble of Megatron-LM's interleaved 1F1B on a materialized plan: with v model chunks per
// device the bubble shrinks v-fold, (p - 1) / v micro-batch times against m of work, an idle fraction of
// (p - 1) / (v m + p - 1) (Narayanan et al. 2021, §2.2).
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>

#include "testing/policy_plans.h"
#include "loom/policy/stages.h"
#include "loom/sim/simulator.h"

namespace loom::sim {
namespace {

// The shrunk GPT with `layers` layers, so that pp x v chunks of whole layers exist.
const ir::Graph& gpt(int layers) {
  static std::map<int, std::unique_ptr<ir::Graph>> cache;
  auto& slot = cache[layers];
  if (!slot) {
    auto forward = models::build_model("gpt3-125m", {.dtype = ir::DType::f32, .layers = layers, .shrink = true});
    EXPECT_TRUE(forward) << forward.error().to_string();
    auto training = forward ? ir::build_training_graph(*forward, ops::builtin_ops(), {}) : Expected<ir::Graph>(ir::Graph{});
    EXPECT_TRUE(training) << training.error().to_string();
    slot = std::make_unique<ir::Graph>(training.value_or(ir::Graph{}));
  }
  return *slot;
}

// Uniform chunks: each stage's forward for one micro-batch takes 1 / v and its backward 2 / v, spread
// evenly over the stage's micro-batch sub-ops (named "op[k/m]" under pp alone) and their backward parts.
// Sub-ops outside the micro-batch blocks (position table, gradient accumulations, the loss-gradient
// seed, optimizer steps) and transfers take 0. Each device is then busy 3m, and the step is
// 3m + 3 (p - 1) / v.
double interleaved_idle_fraction(int p, int v, int m) {
  const auto planned = exec::testing::policy_plan(gpt(p * v), "pp", {.pp = p, .micro_batches = m, .virtual_stages = v});
  const plan::Plan& plan = planned->plan;
  const auto stages = policy::layer_stages(plan, p * v);
  EXPECT_TRUE(stages) << stages.error().to_string();
  if (!stages) return -1;
  const std::string part_of_m = "/" + std::to_string(m) + "]";
  // The stage of a sub-op in a block, or -1.
  const auto stage_of = [&](const plan::SubOp& s) {
    const ir::Op& op = plan.graph->op(s.op);
    const ir::OpId forward = op.pass == ir::Pass::forward ? op.id : op.mirror_of;
    if (!forward.valid() || !s.name.ends_with(part_of_m)) return -1;
    return (*stages)[forward.index()];
  };
  std::map<std::pair<int, ir::Pass>, int> count;  // sub-ops per (stage, pass), all micro-batches
  for (plan::SubOpId id : plan.live_sub_ops())
    if (const int s = stage_of(plan.sub_op(id)); s >= 0) ++count[{s, plan.op_of(id).pass}];
  Durations durations{
      .compute =
          [&](const plan::SubOp& s, int) {
            const int stage = stage_of(s);
            if (stage < 0) return 0.0;
            const ir::Pass pass = plan.graph->op(s.op).pass;
            const double block = (pass == ir::Pass::forward ? 1.0 : 2.0) / v;
            return block * m / count.at({stage, pass});
          },
      .collective = [](const exec::Collective&, std::int64_t) { return 0.0; },
      .p2p = [](int, int, std::int64_t) { return 0.0; }};
  auto result = simulate(planned->exec, durations);
  EXPECT_TRUE(result) << result.error().to_string();
  if (!result) return -1;
  EXPECT_NEAR(result->step_time, 3.0 * m + 3.0 * (p - 1) / v, 1e-9 * m);
  for (const DeviceTime& t : result->devices) EXPECT_NEAR(t.compute, 3.0 * m, 1e-9 * m);
  return result->idle_fraction();
}

TEST(SimulateInterleaved, BubbleIsMegatronsPMinusOneOverVM) {
  for (const auto& [p, v, m] : {std::tuple{2, 2, 2}, std::tuple{2, 2, 4}, std::tuple{2, 3, 4}}) {
    SCOPED_TRACE(fmt::format("p {} v {} m {}", p, v, m));
    const double expected = (p - 1.0) / (v * m + p - 1.0);
    EXPECT_NEAR(interleaved_idle_fraction(p, v, m), expected, 0.01 * expected);
  }
}

}  // namespace
}  // namespace loom::sim
