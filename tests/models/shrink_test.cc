// ModelOptions::shrink: every preset builds a tiny model of its own architecture. (That the float64
// reference interpreter trains each in milliseconds is tested in tests/policy, which links verify.)
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "model_test_support.h"

namespace loom::models {
namespace {

using testing::build_or_fail;
using testing::find_op;
using testing::parameter_count;

std::set<std::string> op_types(const ir::Graph& graph) {
  std::set<std::string> types;
  for (const ir::Op& op : graph.ops) types.insert(op.type);
  return types;
}

// The full-size preset at its smallest depth, to compare op types with: 2 layers where the depth can
// be overridden, Swin's minimum of 7 blocks (its four stages need 2, 2, >= 1, 2), and the fixed depth
// of the convolutional families.
ModelOptions full_size_comparison(const ModelPreset& preset) {
  if (preset.family == "swin") return {.batch = 1, .seq = 384, .layers = 7};
  if (preset.family == "resnet" || preset.family == "vgg" || preset.family == "unet") return {.batch = 1};
  return {.batch = 1, .seq = 16, .layers = 2};
}

TEST(ShrunkPresets, EveryPresetBuildsTinyWithItsOwnOpTypes) {
  for (const ModelPreset& preset : model_presets()) {
    SCOPED_TRACE(preset.name);
    const ir::Graph tiny = build_or_fail(preset.name, {.shrink = true});
    if (tiny.ops.empty()) continue;
    const Expected<ir::Graph> training = ir::build_training_graph(tiny, ops::builtin_ops(), {});
    ASSERT_TRUE(training) << training.error().to_string();
    const Expected<void> valid = ir::validate_graph(*training, ops::builtin_ops());
    EXPECT_TRUE(valid) << (valid ? "" : valid.error().to_string());
    EXPECT_LT(parameter_count(tiny), 50'000);
    EXPECT_GT(parameter_count(tiny), 0);
    // Batch 4 everywhere: data parallelism 2 and 4, or 2 micro-batches of 2.
    for (ir::TensorId in : tiny.inputs) EXPECT_EQ(tiny.tensor(in).shape[0], 4) << tiny.tensor(in).name;
    const ir::Graph full = build_or_fail(preset.name, full_size_comparison(preset));
    EXPECT_EQ(op_types(tiny), op_types(full));
  }
}

TEST(ShrunkPresets, ExplicitOptionsStillOverride) {
  const ir::Graph g = build_or_fail("gpt3-125m", {.batch = 8, .seq = 4, .layers = 3, .shrink = true});
  EXPECT_EQ(g.tensor(g.inputs[0]).shape, (ir::Shape{8, 4}));
  EXPECT_NE(find_op(g, "layers.2.attn.qkv"), nullptr);
  EXPECT_EQ(find_op(g, "layers.3.attn.qkv"), nullptr);
  // The shrunk context is 8 positions: longer sequences are refused as for the full preset.
  EXPECT_FALSE(build_model("gpt3-125m", {.seq = 16, .shrink = true}));
  // Swin's two stages take 2 and layers - 2 blocks; image sides must suit patch 2 x window 2 x one merge.
  const ir::Graph swin = build_or_fail("swin-5b", {.seq = 24, .layers = 5, .shrink = true});
  EXPECT_NE(find_op(swin, "layers.1.blocks.2.norm1"), nullptr);
  EXPECT_FALSE(build_model("swin-5b", {.layers = 2, .shrink = true}));
  EXPECT_FALSE(build_model("swin-5b", {.seq = 12, .shrink = true}));
  const ir::Graph af2 = build_or_fail("alphafold2-930m", {.layers = 2, .shrink = true});
  EXPECT_NE(find_op(af2, "iteration1.evoformer.1.pair_transition.residual"), nullptr);
}

TEST(ShrunkPresets, FamiliesKeepTheirDistinguishingOptions) {
  // GPT-3 13B: a residual stream wider than the attention (4 heads of 4 in a stream of 20).
  const ir::Graph g13 = build_or_fail("gpt3-13b", {.shrink = true});
  const ir::FullTensor* qkv = testing::find_tensor(g13, "layers.0.attn.qkv.weight");
  ASSERT_NE(qkv, nullptr);
  EXPECT_EQ(qkv->shape, (ir::Shape{48, 20}));
  // LLaMA-2-70B keeps grouped-query attention: 8 query heads, 4 key/value heads of 4.
  const ir::Graph llama = build_or_fail("llama2-70b", {.shrink = true});
  const ir::FullTensor* k = testing::find_tensor(llama, "layers.0.attn.k.weight");
  const ir::FullTensor* q = testing::find_tensor(llama, "layers.0.attn.q.weight");
  ASSERT_TRUE(k != nullptr && q != nullptr);
  EXPECT_EQ(q->shape, (ir::Shape{32, 32}));
  EXPECT_EQ(k->shape, (ir::Shape{16, 32}));
  // Swin: two stages joined by a patch merge; AlphaFold2: one block, one recycled pass.
  const ir::Graph swin = build_or_fail("swin-1.8b", {.shrink = true});
  EXPECT_NE(find_op(swin, "layers.0.downsample.merge"), nullptr);
  EXPECT_NE(find_op(swin, "layers.1.blocks.1.shift"), nullptr);
  EXPECT_EQ(find_op(swin, "layers.2.blocks.0.norm1"), nullptr);
  const ir::Graph af2 = build_or_fail("alphafold2-87m", {.shrink = true});
  EXPECT_NE(find_op(af2, "iteration1.recycling.detach_m"), nullptr);
  EXPECT_EQ(find_op(af2, "iteration2.recycling.detach_m"), nullptr);
  // MoE: the second layer is the expert layer, 4 experts.
  const ir::Graph moe = build_or_fail("moe-380m", {.shrink = true});
  const ir::FullTensor* wi = testing::find_tensor(moe, "layers.1.moe.experts.wi");
  ASSERT_NE(wi, nullptr);
  EXPECT_EQ(wi->shape[0], 4);
}

}  // namespace
}  // namespace loom::models
