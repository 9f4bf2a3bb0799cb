// The shrunk presets (ModelOptions::shrink) are small enough for the float64 reference interpreter:
// every preset's whole training step (forward, backward, AdamW) runs in well under a second. (Here
// rather than in tests/models because the models tests do not link the verify library.)
#include <gtest/gtest.h>

#include <chrono>

#include "loom/ir/autograd.h"
#include "loom/models/zoo.h"
#include "loom/ops/registry.h"
#include "loom/verify/graph_interpreter.h"

namespace loom::models {
namespace {

TEST(ShrunkPresets, TheReferenceInterpreterRunsEveryTrainingStepQuickly) {
  for (const ModelPreset& preset : model_presets()) {
    SCOPED_TRACE(preset.name);
    auto forward = build_model(preset.name, {.dtype = ir::DType::f32, .shrink = true});
    ASSERT_TRUE(forward) << forward.error().to_string();
    auto training = ir::build_training_graph(*forward, ops::builtin_ops(), {.kind = ir::OptimizerKind::adamw});
    ASSERT_TRUE(training) << training.error().to_string();
    const auto start = std::chrono::steady_clock::now();
    auto values = verify::run_graph(*training, verify::initial_values(*training, 7));
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ASSERT_TRUE(values) << values.error().to_string();
    EXPECT_LT(seconds, 0.25);
  }
}

}  // namespace
}  // namespace loom::models
