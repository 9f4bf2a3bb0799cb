// Recomputation (plan/recompute.h, policy/recompute_policy.h): the recomputed plans train exactly as one
// device does, run the chosen forward sub-ops a second time, and hold less activation memory at the peak.
#include "loom/policy/recompute_policy.h"

#include <gtest/gtest.h>

#include "loom/cluster/presets.h"
#include "loom/exec/check.h"
#include "loom/exec/materialize.h"
#include "loom/plan/recompute.h"
#include "loom/verify/exec_interpreter.h"
#include "policy_test_support.h"

namespace loom::policy {
namespace {

using testing::planned;
using testing::shrunk;

struct Outcome {
  std::int64_t recomputed = 0;
  std::int64_t peak_activation = 0;  // activation bytes at each device's peak, the largest
};

Outcome run(std::string_view preset, std::string_view policy, const ParallelConfig& config, Recompute recompute) {
  SCOPED_TRACE(std::string(preset) + " / " + std::string(policy) + " / " + std::string(name(recompute)));
  const testing::Model& model = shrunk(preset);
  plan::Plan p = planned(preset, policy, config);
  const auto applied = apply_recompute(p, recompute);
  EXPECT_TRUE(applied) << applied.error().to_string();
  exec::MaterializeOptions options;
  options.cost_model = exec::bandwidth_only_cost(cluster::make_cluster("dgx-a100").value());
  auto m = exec::materialize(p, device_count(config), options);
  EXPECT_TRUE(m) << m.error().to_string();
  if (!m) return {};
  m->exec.plan = &p;
  const auto checked = exec::check_exec_plan(m->exec);
  EXPECT_TRUE(checked) << checked.error().to_string();
  auto ran = verify::run_exec_plan(m->exec, model.initial);
  EXPECT_TRUE(ran) << (ran ? "" : ran.error().to_string());
  if (!ran) return {};
  auto c = verify::compare_runs(model.graph, model.reference, ran->values);
  EXPECT_TRUE(c) << c.error().to_string();
  if (c) {
    for (const auto& [role, stat] : {std::pair{"activation", c->activation}, std::pair{"gradient", c->gradient},
                                     std::pair{"updated", c->updated}, std::pair{"loss", c->loss}}) {
      EXPECT_LT(stat.max_rel, 1e-9) << role << ": " << stat.worst << " rel " << stat.max_rel;
    }
  }
  return {.recomputed = m->stats.recomputed, .peak_activation = testing::peak_activation_bytes(m->exec)};
}

// Full recompute at tp 2 (policy/recompute_policy.h, exec/materialize.h): by default the all-reduced
// outputs of the attention's and the MLP's row-parallel linears are checkpoints (Oases' fine-grained
// recompute: no collective in the recomputation), three [b, s, h] tensors per layer; with
// recompute_collectives (Megatron-LM's full recompute) they are summed again in the recomputation and the
// backward reads those sums, so the layer input is the only checkpoint: one tensor per layer, with and
// without coshard.
TEST(Recompute, CollectivesAgainKeepOnlyTheLayerInput) {
  const std::int64_t one_tensor = std::int64_t{256} * 768 * ir::size_bytes(ir::DType::f16);
  for (const bool again : {false, true}) {
    for (const int parts : {1, 2}) {
      SCOPED_TRACE(fmt::format("recompute_collectives {} coshard {}", again, parts));
      std::int64_t peak[2] = {};
      for (const int layers : {2, 6}) {
        ParallelConfig config{.tp = 2, .recompute = Recompute::full};
        config.coshard.parts = parts;
        api::JobOptions options = api::with_config({.policy = "megatron"}, config);
        options.recompute_collectives = again;
        const auto job = exec::testing::policy_plan(testing::small_vocab_gpt(layers), options);
        ASSERT_EQ(job->stage, api::Stage::materialized);
        peak[layers == 6] = testing::peak_activation_bytes(job->exec);
      }
      EXPECT_EQ((peak[1] - peak[0]) / 4, (again ? 1 : 3) * one_tensor);
    }
  }
}

TEST(Recompute, FullAndSelectiveTrainExactlyAndSaveActivationMemory) {
  for (const auto& [policy, config] : {std::pair{"dp", ParallelConfig{.dp = 2}}, std::pair{"tp", ParallelConfig{.tp = 2}},
                                       std::pair{"megatron", ParallelConfig{.dp = 2, .tp = 2}}}) {
    for (const char* preset : {"gpt3-125m", "llama3-8b"}) {
      const Outcome none = run(preset, policy, config, Recompute::none);
      const Outcome selective = run(preset, policy, config, Recompute::selective);
      const Outcome full = run(preset, policy, config, Recompute::full);
      EXPECT_EQ(none.recomputed, 0);
      EXPECT_GT(selective.recomputed, 0) << preset << " " << policy;
      EXPECT_GT(full.recomputed, selective.recomputed) << preset << " " << policy;
      EXPECT_LT(full.peak_activation, none.peak_activation) << preset << " " << policy;
      EXPECT_LE(full.peak_activation, selective.peak_activation) << preset << " " << policy;
    }
  }
}

TEST(Recompute, PipelinedPlansTrainExactly) {
  run("gpt3-125m", "megatron", {.pp = 2, .micro_batches = 4}, Recompute::full);
  run("llama3-8b", "megatron", {.tp = 2, .pp = 2, .micro_batches = 2}, Recompute::selective);
}

// Gradient accumulation runs F0 B0 F1 B1 ...: one micro-batch's activations are alive at a time.
TEST(GradientAccumulationMemory, OneMicroBatchOfActivationsAtATime) {
  const Outcome whole = run("gpt3-125m", "megatron", {.dp = 2}, Recompute::none);
  const Outcome accumulated = run("gpt3-125m", "megatron", {.dp = 2, .micro_batches = 2}, Recompute::none);
  EXPECT_LT(accumulated.peak_activation, 0.7 * static_cast<double>(whole.peak_activation));
}

TEST(Recompute, Errors) {
  plan::Plan p = planned("gpt3-125m", "dp", {.dp = 2});
  EXPECT_FALSE(parse_recompute("partial"));
  EXPECT_EQ(parse_recompute("full").value(), Recompute::full);
  // Backward sub-ops cannot be recomputed.
  for (const ir::Op& op : p.graph->ops)
    if (op.is_mirror()) {
      const auto r = plan::recompute(p, {&p.parts[op.id.index()].front(), 1});
      ASSERT_FALSE(r);
      EXPECT_NE(r.error().to_string().find("not a forward sub-op"), std::string::npos);
      break;
    }
}

}  // namespace
}  // namespace loom::policy
