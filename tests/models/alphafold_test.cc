#include <gtest/gtest.h>

#include "loom/ir/autograd.h"
#include "loom/models/zoo.h"
#include "loom/ops/registry.h"
#include "model_test_support.h"

namespace loom::models {
namespace {

using testing::parameter_count;

// Evoformer block, sub-module by sub-module (AF2 supplementary Alg. 6-15), head dim 32, cz = cm / 2.
std::int64_t evoformer_params(std::int64_t cm, std::int64_t heads, std::int64_t blocks) {
  const std::int64_t cz = cm / 2, pair_heads = cz / 32;
  const auto gated = [](std::int64_t c, std::int64_t h, std::int64_t bias_c) {
    return 4 * h * 32 * c + h * 32 + h * bias_c + c * h * 32 + c;
  };
  const auto transition = [](std::int64_t c) { return 2 * c + c * 4 * c + 4 * c + 4 * c * c + c; };
  const std::int64_t row = 2 * cm + 2 * cz + gated(cm, heads, cz);
  const std::int64_t col = 2 * cm + gated(cm, heads, 0);
  const std::int64_t opm = 2 * cm + 2 * 32 * cm + 2 * 32 + cz * 32 * 32 + cz;
  const std::int64_t tri_mul = 2 * cz + 4 * cz * cz + 4 * cz + 2 * cz + 2 * (cz * cz + cz);
  const std::int64_t tri_att = 2 * cz + gated(cz, pair_heads, cz);
  const std::int64_t block = row + col + transition(cm) + opm + 2 * tri_mul + 2 * tri_att + transition(cz);
  return blocks * block + 2 * cm + 2 * cz + cz * 64 + 64;  // + recycling norms, distogram head
}

TEST(AlphaFoldPresets, ParameterCountsMatchTheClosedForm) {
  const std::vector<std::tuple<const char*, std::int64_t, std::int64_t, std::int64_t>> cases = {
      {"alphafold2-87m", 256, 8, 48}, {"alphafold2-930m", 512, 16, 64},
      {"alphafold2-2.4b", 1024, 32, 96}, {"alphafold2-3.2b", 1024, 32, 128}};
  for (const auto& [name, cm, heads, blocks] : cases) {
    auto g = build_model(name, {.batch = 1, .seq = 8});
    ASSERT_TRUE(g) << name << ": " << g.error().to_string();
    EXPECT_EQ(parameter_count(*g), evoformer_params(cm, heads, blocks)) << name;
  }
  auto g = build_model("alphafold2-87m", {.batch = 1, .seq = 8});
  ASSERT_TRUE(g);
  EXPECT_NEAR(static_cast<double>(parameter_count(*g)), 87.8e6, 0.1e6);  // AF2's Evoformer: 1.83M per block
}

TEST(AlphaFoldPresets, OnlyTheLastRecyclingIterationGetsABackward) {
  auto forward = build_model("alphafold2-87m", {.batch = 1, .seq = 8, .layers = 2});
  ASSERT_TRUE(forward) << forward.error().to_string();
  auto training = ir::add_backward(*forward, ops::builtin_ops());
  ASSERT_TRUE(training) << training.error().to_string();
  int mirrored_last = 0, mirrored_earlier = 0;
  for (const ir::Op& op : training->ops) {
    if (!op.is_mirror()) continue;
    const std::string& of = training->op(op.mirror_of).name;
    if (of.starts_with("iteration3.")) ++mirrored_last;
    if (of.starts_with("iteration0.") || of.starts_with("iteration1.") || of.starts_with("iteration2.")) ++mirrored_earlier;
  }
  EXPECT_GT(mirrored_last, 0);
  EXPECT_EQ(mirrored_earlier, 0);
}

TEST(AlphaFoldPresets, DefaultShapesFollowSuperScaler) {
  auto g = build_model("alphafold2-87m", {.layers = 1});
  ASSERT_TRUE(g) << g.error().to_string();
  EXPECT_EQ(g->tensor(g->inputs[0]).shape, (ir::Shape{128, 128, 256, 256}));
  EXPECT_EQ(g->tensor(g->inputs[1]).shape, (ir::Shape{128, 256, 256, 128}));
}

}  // namespace
}  // namespace loom::models
