// Symmetric devices get equal programs (plan::complete_order): data-parallel replicas, tensor-parallel
// peers and the devices of one pipeline stage fall into one device class (exec/device_classes.h), and
// the simulator then runs one program per class, with the step time of the full simulation.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "loom/policy/policy.h"
#include "loom/sim/simulator.h"
#include "sim_support.h"

namespace loom::sim {
namespace {

struct Case {
  std::string preset;
  policy::ParallelConfig config;
};

std::string describe(const Case& c) {
  return fmt::format("{} dp {} x tp {} x pp {}, {} micro-batches", c.preset, c.config.dp, c.config.tp, c.config.pp,
                     c.config.micro_batches);
}

const std::vector<Case>& cases(const std::string& preset) {
  static std::map<std::string, std::vector<Case>> by_preset;
  auto& list = by_preset[preset];
  if (list.empty())
    list = {{preset, {.dp = 2, .tp = 2, .pp = 2, .micro_batches = 2}},
            {preset, {.dp = 2, .tp = 2, .micro_batches = 2}}};
  return list;
}

// A class never mixes pipeline stages (devices (stage x dp + r) x tp + j), whose programs differ.
void expect_classes_within_stages(const exec::ExecPlan& exec, const policy::ParallelConfig& config) {
  const int per_stage = config.dp * config.tp;
  for (int d = 0; d < exec.num_devices; ++d) {
    const int k = exec.class_of[static_cast<std::size_t>(d)];
    const int representative = exec.representatives[static_cast<std::size_t>(k)];
    EXPECT_EQ(d / per_stage, representative / per_stage) << "device " << d << " is in the class of " << representative;
  }
}

// The symmetric simulation (when the symmetry check lets it run) and the full one agree.
Expected<SimResult> expect_same_step_as_full(const exec::ExecPlan& exec) {
  const auto priced = testing::priced(exec);
  auto symmetric = simulate(exec, priced->durations);
  auto full = simulate(exec, priced->durations, {.use_device_classes = false});
  EXPECT_TRUE(symmetric) << symmetric.error().to_string();
  EXPECT_TRUE(full) << full.error().to_string();
  if (symmetric && full) {
    EXPECT_FALSE(full->symmetric());
    EXPECT_NEAR(symmetric->step_time, full->step_time, 1e-9 * full->step_time);
  }
  return symmetric;
}

// Llama ties no weights across stages, so every device of a stage runs the same program: one class per
// stage, and the simulator runs one device per stage.
TEST(SymmetricPrograms, MegatronGivesOneClassPerStage) {
  for (const Case& c : cases("llama3-8b")) {
    SCOPED_TRACE(describe(c));
    const auto p = testing::classed_plan("megatron", c.config, c.preset);
    EXPECT_EQ(p->exec.representatives.size(), static_cast<std::size_t>(c.config.pp));
    expect_classes_within_stages(p->exec, c.config);
    const auto result = expect_same_step_as_full(p->exec);
    ASSERT_TRUE(result);
    EXPECT_TRUE(result->symmetric()) << result->symmetry_fallback;
    EXPECT_EQ(result->simulated_devices.size(), static_cast<std::size_t>(c.config.pp));
  }
}

// GPT ties the head to the token embedding. Its weight gradient is the sum of the head's (last stage)
// and the embedding's (first stage) partial sums, which the tp and dp peers get from different devices:
// under pp the last stage sends them to the first stage's devices one after another (equal programs,
// unequal times, so the symmetry check sends the simulator to every device), and without pp the layout
// of the head's gradient differs from the embedding's, whose fallback fetch takes each piece from the
// nearest holder (exec/fetch.h), a different choice on each device. Those are real asymmetries; the
// order completion adds none: at most one class per stage under pp, and never two stages in a class.
TEST(SymmetricPrograms, MegatronWithTiedEmbeddingsStaysWithinStages) {
  for (const Case& c : cases("gpt3-125m")) {
    SCOPED_TRACE(describe(c));
    const auto p = testing::classed_plan("megatron", c.config, c.preset);
    // The tied gradient's senders and receivers split a stage's devices at most in two.
    if (c.config.pp > 1) {
      EXPECT_LE(p->exec.representatives.size(), static_cast<std::size_t>(2 * c.config.pp));
    }
    expect_classes_within_stages(p->exec, c.config);
    EXPECT_TRUE(expect_same_step_as_full(p->exec));
  }
}

}  // namespace
}  // namespace loom::sim
