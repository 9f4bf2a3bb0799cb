#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "lm_test_support.h"
#include "loom/models/transformer_blocks.h"

namespace loom::models {
namespace {

using testing::build_or_fail;
using testing::find_op;
using testing::find_tensor;
using testing::parameter_count;
using testing::relative_gap;

struct LlamaShape {
  std::string name;
  std::int64_t layers, hidden, heads, kv_heads, ffn, vocab, seq;
};

// REFERENCE.md (LLaMA row); head_dim is 128 throughout.
const std::vector<LlamaShape> kShapes = {
    {"llama-7b", 32, 4096, 32, 32, 11008, 32000, 2048},   {"llama-13b", 40, 5120, 40, 40, 13824, 32000, 2048},
    {"llama-65b", 80, 8192, 64, 64, 22016, 32000, 2048},  {"llama2-70b", 80, 8192, 64, 8, 28672, 32000, 4096},
    {"llama3-8b", 32, 4096, 32, 8, 14336, 128256, 8192},
};

// Per layer: q, o h·h each; k, v h·(kv·d) each; gate, up, down h·ffn each; two RMSNorms h each.
// Plus embedding and untied head V·h each, final norm h.
std::int64_t llama_params(const LlamaShape& s, std::int64_t layers) {
  const std::int64_t d = s.hidden / s.heads, h = s.hidden;
  const std::int64_t layer = 2 * h * h + 2 * h * s.kv_heads * d + 3 * h * s.ffn + 2 * h;
  return layers * layer + 2 * s.vocab * h + h;
}

TEST(LlamaPresets, EveryPresetMatchesTheClosedFormCount) {
  for (const LlamaShape& s : kShapes) {
    SCOPED_TRACE(s.name);
    const ModelPreset* preset = find_preset(s.name);
    ASSERT_NE(preset, nullptr);
    EXPECT_EQ(preset->family, "llama");
    EXPECT_EQ(preset->default_seq, s.seq);
    const ir::Graph graph = build_or_fail(s.name, {.batch = 1, .seq = 8});
    const std::int64_t count = parameter_count(graph);
    EXPECT_EQ(count, llama_params(s, s.layers));
    const double gap = testing::report_gap(*preset, count);
    EXPECT_LT(std::abs(gap), 0.02);
  }
}

TEST(LlamaPresets, PaperCounts) {
  // LLaMA-7B is 6.74B (Touvron et al. 2023, "6.7B"); LLaMA-2-70B is 69.0B (within 1 % of 69B).
  EXPECT_EQ(parameter_count(build_or_fail("llama-7b", {.batch = 1, .seq = 8})), 6'738'415'616);
  const std::int64_t llama2 = parameter_count(build_or_fail("llama2-70b", {.batch = 1, .seq = 8}));
  EXPECT_EQ(llama2, 68'976'648'192);
  EXPECT_LT(std::abs(relative_gap(static_cast<double>(llama2), 69e9)), 0.01);
  EXPECT_EQ(parameter_count(build_or_fail("llama3-8b", {.batch = 1, .seq = 8})), 8'030'261'248);
}

TEST(LlamaGraph, GroupedQueryAttentionKeepsEightKeyValueHeads) {
  const ir::Graph graph = build_or_fail("llama2-70b", {.batch = 2, .seq = 16, .layers = 1});
  EXPECT_EQ(find_tensor(graph, "layers.0.attn.q.weight")->shape, (ir::Shape{8192, 8192}));
  EXPECT_EQ(find_tensor(graph, "layers.0.attn.k.weight")->shape, (ir::Shape{1024, 8192}));
  EXPECT_EQ(find_tensor(graph, "layers.0.attn.v.weight")->shape, (ir::Shape{1024, 8192}));
  const ir::Op* sdpa = find_op(graph, "layers.0.attn.sdpa");
  ASSERT_NE(sdpa, nullptr);
  EXPECT_EQ(graph.tensor(sdpa->inputs[0]).shape, (ir::Shape{2, 64, 16, 128}));
  EXPECT_EQ(graph.tensor(sdpa->inputs[1]).shape, (ir::Shape{2, 8, 16, 128}));
  EXPECT_EQ(graph.tensor(sdpa->inputs[2]).shape, (ir::Shape{2, 8, 16, 128}));
  EXPECT_EQ(graph.tensor(sdpa->outputs[0]).shape, (ir::Shape{2, 64, 16, 128}));
  // The query heads are grouped over the key/value heads: only the kv head may split.
  EXPECT_NE(sdpa->annotation.find("(h r)"), std::string::npos) << sdpa->annotation;

  // Multi-head LLaMA-1 has no grouping.
  const ir::Graph mha = build_or_fail("llama-7b", {.batch = 1, .seq = 16, .layers = 1});
  EXPECT_EQ(find_op(mha, "layers.0.attn.sdpa")->annotation.find("(h r)"), std::string::npos);
}

TEST(LlamaGraph, RmsNormRopeSwigluNoBiasesUntiedHead) {
  const ir::Graph graph = build_or_fail("llama3-8b", {.batch = 1, .seq = 32, .layers = 2});
  for (ir::TensorId p : graph.parameters) {
    const std::string& name = graph.tensor(p).name;
    EXPECT_FALSE(name.ends_with(".bias")) << name;
  }
  EXPECT_EQ(find_op(graph, "layers.1.attn_norm")->type, "rms_norm");
  EXPECT_EQ(find_op(graph, "norm")->type, "rms_norm");
  const ir::Op* rope = find_op(graph, "layers.0.attn.rope_k");
  ASSERT_NE(rope, nullptr);
  EXPECT_EQ(rope->type, "rotary_embedding");
  EXPECT_DOUBLE_EQ(std::get<double>(rope->attrs.at("base")), 500000.0);
  EXPECT_NE(find_op(graph, "layers.0.attn.rope_q"), nullptr);
  EXPECT_EQ(find_op(graph, "layers.0.mlp.act")->type, "swiglu");
  EXPECT_EQ(find_tensor(graph, "layers.0.mlp.down.weight")->shape, (ir::Shape{4096, 14336}));
  EXPECT_EQ(find_tensor(graph, "lm_head.weight")->shape, (ir::Shape{128256, 4096}));
  EXPECT_EQ(graph.tensor(find_op(graph, "lm_head")->outputs[0]).shape, (ir::Shape{1, 32, 128256}));
  EXPECT_EQ(testing::count_ops(graph, "dropout"), 0u);
  EXPECT_EQ(graph.tensor(graph.loss).shape, ir::Shape{});
}

TEST(LlamaOptions, OptionsShapeTheGraph) {
  const ir::Graph graph = build_or_fail("llama-7b", {.batch = 4, .seq = 256, .dtype = ir::DType::f16, .layers = 3});
  EXPECT_EQ(graph.tensor(graph.inputs[0]).shape, (ir::Shape{4, 256}));
  EXPECT_EQ(testing::count_ops(graph, "scaled_dot_product_attention"), 3u);
  EXPECT_EQ(parameter_count(graph), llama_params(kShapes[0], 3));
  for (ir::TensorId p : graph.parameters) EXPECT_EQ(graph.tensor(p).dtype, ir::DType::f16);
  // RoPE has no position table: any sequence length builds.
  const ir::Graph longer = build_or_fail("llama-7b", {.batch = 1, .seq = 32768, .layers = 1});
  EXPECT_EQ(longer.tensor(longer.inputs[0]).shape, (ir::Shape{1, 32768}));
  // Defaults: 4M-token batches at the model's context.
  const ir::Graph defaults = build_or_fail("llama2-70b", {.layers = 1});
  EXPECT_EQ(defaults.tensor(defaults.inputs[0]).shape, (ir::Shape{1024, 4096}));
  EXPECT_FALSE(build_model("llama-7b", {.seq = -4}).has_value());
}

TEST(LlamaPresets, EveryPresetValidatesAndDifferentiates) {
  testing::expect_presets_valid_for_training(kShapes);
}

// The shared attention block rejects a head grouping that cannot exist, naming the block.
TEST(TransformerBlocks, AttentionRejectsQueryHeadsNotAMultipleOfKvHeads) {
  ir::GraphBuilder b("gqa", ops::builtin_ops());
  const ir::TensorId x = b.input("x", {1, 8, 96}, ir::DType::bf16);
  {
    auto s = b.scope("layers.0.attn");
    self_attention(b, x, {.hidden = 96, .heads = 6, .kv_heads = 4, .bias = false, .fused_qkv = false},
                   ir::DType::bf16);
  }
  const Expected<ir::Graph> graph = std::move(b).finish();
  ASSERT_FALSE(graph.has_value());
  EXPECT_NE(graph.error().message.find("layers.0.attn"), std::string::npos) << graph.error().to_string();
  EXPECT_NE(graph.error().message.find("4 key/value heads"), std::string::npos) << graph.error().to_string();
}

}  // namespace
}  // namespace loom::models
