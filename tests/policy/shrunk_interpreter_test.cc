// The shrunk presets (ModelOptions::shrink) are small enough for the float64 reference interpreter: every
// preset's whole training step (forward, backward, AdamW) runs, and its work is bounded by a count, not a
// clock (a timed assertion fails on a busy machine): at most kMaxFlops FLOPs and kMaxElements elements of
// activations. (Here rather than in tests/models because the models tests do not link the verify library.)
#include <gtest/gtest.h>

#include "loom/ir/autograd.h"
#include "loom/ir/graph_stats.h"
#include "loom/models/zoo.h"
#include "loom/ops/registry.h"
#include "loom/verify/graph_interpreter.h"

namespace loom::models {
namespace {

// About a tenth of a second of the interpreter on this 2-core box (its speed lives in benchmarks).
constexpr double kMaxFlops = 2e8;
constexpr double kMaxActivationBytes = 64.0 * (1 << 20);

TEST(ShrunkPresets, TheReferenceInterpreterRunsEveryTrainingStepOfBoundedWork) {
  for (const ModelPreset& preset : model_presets()) {
    SCOPED_TRACE(preset.name);
    auto forward = build_model(preset.name, {.dtype = ir::DType::f32, .shrink = true});
    ASSERT_TRUE(forward) << forward.error().to_string();
    auto training = ir::build_training_graph(*forward, ops::builtin_ops(), {.kind = ir::OptimizerKind::adamw});
    ASSERT_TRUE(training) << training.error().to_string();
    auto stats = ir::compute_stats(*training, ops::builtin_ops());
    ASSERT_TRUE(stats) << stats.error().to_string();
    EXPECT_LT(stats->total_flops(), kMaxFlops);
    EXPECT_LT(stats->activation_bytes, kMaxActivationBytes);
    auto values = verify::run_graph(*training, verify::initial_values(*training, 7));
    ASSERT_TRUE(values) << values.error().to_string();
  }
}

}  // namespace
}  // namespace loom::models
