#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "lm_test_support.h"

namespace loom::models {
namespace {

using testing::build_or_fail;
using testing::find_op;
using testing::find_tensor;
using testing::parameter_count;

struct MoeShape {
  std::string name;
  std::int64_t layers, hidden, ffn, experts;
};

// Rhino Table 2 (REFERENCE.md).
const std::vector<MoeShape> kShapes = {
    {"moe-380m", 8, 768, 6144, 8},     {"moe-760m", 16, 768, 6144, 8},     {"moe-1.3b", 16, 768, 6144, 16},
    {"moe-2.4b", 16, 1024, 8192, 16},  {"moe-10b", 16, 1536, 12288, 32},
};
constexpr std::int64_t kVocab = 32000, kContext = 1024;

// Even layers dense, odd layers MoE. Both: attention 4h² + 4h, LayerNorms 4h. Dense FFN 2hf + f + h;
// MoE FFN: gate E·h and experts 2·E·h·f (no expert biases). Plus tied wte V·h, wpe S·h, ln_f 2h.
std::int64_t moe_params(const MoeShape& s, std::int64_t layers) {
  const std::int64_t h = s.hidden, f = s.ffn, e = s.experts;
  const std::int64_t common = 4 * h * h + 4 * h + 4 * h;
  const std::int64_t moe_layers = layers / 2, dense_layers = layers - moe_layers;
  return dense_layers * (common + 2 * h * f + f + h) + moe_layers * (common + e * h + 2 * e * h * f) + kVocab * h +
         kContext * h + 2 * h;
}

TEST(MoePresets, ClosedFormCountsNearTheNames) {
  for (const MoeShape& s : kShapes) {
    SCOPED_TRACE(s.name);
    const ModelPreset* preset = find_preset(s.name);
    ASSERT_NE(preset, nullptr);
    EXPECT_EQ(preset->family, "moe");
    const ir::Graph graph = build_or_fail(s.name, {.batch = 1, .seq = 16});
    const std::int64_t count = parameter_count(graph);
    EXPECT_EQ(count, moe_params(s, s.layers));
    const double gap = testing::report_gap(*preset, count);
    EXPECT_LT(std::abs(gap), 0.04);
  }
}

TEST(MoeGraph, EveryOtherFfnIsAnExpertLayer) {
  const ir::Graph graph = build_or_fail("moe-1.3b", {.batch = 2, .seq = 128, .layers = 4});
  EXPECT_NE(find_op(graph, "layers.0.mlp.fc1"), nullptr);
  EXPECT_EQ(find_op(graph, "layers.0.moe.gate"), nullptr);
  EXPECT_NE(find_op(graph, "layers.1.moe.gate"), nullptr);
  EXPECT_EQ(find_op(graph, "layers.1.mlp.fc1"), nullptr);
  EXPECT_NE(find_op(graph, "layers.3.moe.combine"), nullptr);
  EXPECT_EQ(testing::count_ops(graph, "moe_gate"), 2u);

  // Top-2 gating with capacity factor 1: c = 2·t/E = 2·128/16 = 16 per group (one sequence).
  const ir::Op* gate = find_op(graph, "layers.1.moe.gate");
  EXPECT_EQ(std::get<std::int64_t>(gate->attrs.at("top_k")), 2);
  EXPECT_EQ(std::get<std::int64_t>(gate->attrs.at("capacity")), 16);
  ASSERT_EQ(gate->outputs.size(), 2u);
  EXPECT_EQ(graph.tensor(gate->outputs[0]).shape, (ir::Shape{2, 128, 16, 16}));
  EXPECT_EQ(find_tensor(graph, "layers.1.moe.gate.weight")->shape, (ir::Shape{16, 768}));
  EXPECT_EQ(find_tensor(graph, "layers.1.moe.experts.wi")->shape, (ir::Shape{16, 768, 6144}));
  EXPECT_EQ(find_tensor(graph, "layers.1.moe.experts.wo")->shape, (ir::Shape{16, 6144, 768}));
  const ir::Op* fc1 = find_op(graph, "layers.1.moe.experts.fc1");
  ASSERT_NE(fc1, nullptr);
  EXPECT_EQ(fc1->type, "einsum");
  EXPECT_EQ(graph.tensor(fc1->inputs[0]).shape, (ir::Shape{16, 2, 16, 768}));  // dispatched [E g c h]
  EXPECT_EQ(graph.tensor(fc1->outputs[0]).shape, (ir::Shape{16, 2, 16, 6144}));
  EXPECT_EQ(graph.tensor(find_op(graph, "layers.1.moe.combine")->outputs[0]).shape, (ir::Shape{2, 128, 768}));
  EXPECT_EQ(graph.tensor(find_op(graph, "lm_head")->outputs[0]).shape, (ir::Shape{2, 128, kVocab}));
  EXPECT_EQ(graph.tensor(graph.loss).shape, ir::Shape{});
  EXPECT_EQ(parameter_count(graph), moe_params(kShapes[2], 4));
}

TEST(MoeOptions, OptionsAndErrors) {
  const ir::Graph graph = build_or_fail("moe-10b", {.batch = 4, .seq = 512, .dtype = ir::DType::f32, .layers = 2});
  EXPECT_EQ(graph.tensor(graph.inputs[0]).shape, (ir::Shape{4, 512}));
  EXPECT_EQ(std::get<std::int64_t>(find_op(graph, "layers.1.moe.gate")->attrs.at("capacity")), 32);  // 2·512/32
  for (ir::TensorId p : graph.parameters) EXPECT_EQ(graph.tensor(p).dtype, ir::DType::f32);
  // Defaults: Rhino's global batch 256, seq 1024.
  const ir::Graph defaults = build_or_fail("moe-380m", {.layers = 2});
  EXPECT_EQ(defaults.tensor(defaults.inputs[0]).shape, (ir::Shape{256, 1024}));

  const Expected<ir::Graph> one_layer = build_model("moe-380m", {.layers = 1});
  ASSERT_FALSE(one_layer.has_value());
  EXPECT_NE(one_layer.error().message.find("MoE"), std::string::npos) << one_layer.error().to_string();
  EXPECT_FALSE(build_model("moe-380m", {.seq = 2048}).has_value());
}

TEST(MoePresets, EveryPresetValidatesAndDifferentiates) {
  testing::expect_presets_valid_for_training(kShapes);
}

}  // namespace
}  // namespace loom::models
