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

struct EncDecShape {
  std::string name;
  std::int64_t layers, hidden, heads;  // layers: encoder + decoder
};

// nnScaler Table 9 and SuperScaler Table 2 (REFERENCE.md).
const std::vector<EncDecShape> kT5 = {
    {"t5-3.9b", 48, 2048, 32}, {"t5-11b", 64, 3072, 48}, {"t5-21b", 64, 4096, 64}, {"t5-47b", 64, 6144, 96}};
const std::vector<EncDecShape> kMbart = {
    {"mbart-4.7b", 24, 3072, 16}, {"mbart-9.5b", 32, 4096, 32},
    {"mbart-20b", 48, 5120, 32},  {"mbart-32b", 56, 6144, 32}};
constexpr std::int64_t kT5Vocab = 32128, kMbartVocab = 500096,  // 500000 padded to a multiple of 128, as Megatron-LM pads
                          kMbartSeq = 1024, kBuckets = 32;

// T5: shared V·h; encoder layer 2 RMSNorms + q,k,v,o + wi, wo; decoder layer 3 RMSNorms + self and
// cross attention + wi, wo; per stack a [32, heads] relative bias and a final RMSNorm. No biases.
std::int64_t t5_params(const EncDecShape& s, std::int64_t total_layers) {
  const std::int64_t h = s.hidden, f = 4 * h, half = total_layers / 2;
  return kT5Vocab * h + half * (2 * h + 4 * h * h + 2 * h * f) + half * (3 * h + 8 * h * h + 2 * h * f) +
         2 * (kBuckets * s.heads + h);
}

// mBART: shared V·h; per stack positions (S + 2)·h, LayerNorms on the embedding and at the end;
// encoder layer 2 LayerNorms + attention with biases + FFN with biases; decoder layer 3 + 2 + 1.
std::int64_t mbart_params(const EncDecShape& s, std::int64_t total_layers) {
  const std::int64_t h = s.hidden, f = 4 * h, half = total_layers / 2;
  const std::int64_t attention = 4 * h * h + 4 * h, ffn = 2 * h * f + f + h;
  return kMbartVocab * h + 2 * ((kMbartSeq + 2) * h + 2 * h + 2 * h) + half * (2 * 2 * h + attention + ffn) +
         half * (3 * 2 * h + 2 * attention + ffn);
}

TEST(T5Presets, ClosedFormCountsAndTheGapToTheNames) {
  for (const EncDecShape& s : kT5) {
    SCOPED_TRACE(s.name);
    const ModelPreset* preset = find_preset(s.name);
    ASSERT_NE(preset, nullptr);
    const ir::Graph graph = build_or_fail(s.name, {.batch = 1, .seq = 8});
    const std::int64_t count = parameter_count(graph);
    EXPECT_EQ(count, t5_params(s, s.layers));
    const double gap = testing::report_gap(*preset, count);
    // nnScaler's counts imply a far larger (multilingual) vocabulary than T5's; see t5.cc. Pin the
    // gap's range so that a change of reading is deliberate.
    EXPECT_GT(gap, -0.32);
    EXPECT_LT(gap, -0.20);
  }
}

TEST(MbartPresets, ClosedFormCountsNearTheNames) {
  for (const EncDecShape& s : kMbart) {
    SCOPED_TRACE(s.name);
    const ModelPreset* preset = find_preset(s.name);
    ASSERT_NE(preset, nullptr);
    const ir::Graph graph = build_or_fail(s.name, {.batch = 1, .seq = 8});
    const std::int64_t count = parameter_count(graph);
    EXPECT_EQ(count, mbart_params(s, s.layers));
    const double gap = testing::report_gap(*preset, count);
    // +0.3 %, +0.8 %, +1.0 %, +2.1 %: SuperScaler's names round down (32.7B is "32B").
    EXPECT_LT(std::abs(gap), 0.025);
  }
}

// ModelOptions::vocab replaces the vocabulary (mT5's 250,112 tokens for nnScaler's Fig. 8) before padding:
// the shared table and the logits take it; a shrunk model keeps its own; a negative count is refused.
TEST(T5Options, VocabReplacesThePresetsVocabulary) {
  const auto rows = [](const ir::Graph& g) { return g.tensor(find_op(g, "lm_head")->outputs[0]).shape.dims.back(); };
  EXPECT_EQ(rows(build_or_fail("t5-3.9b", {.batch = 1, .seq = 8, .layers = 2})), 32128);
  EXPECT_EQ(rows(build_or_fail("t5-3.9b", {.batch = 1, .seq = 8, .layers = 2, .vocab = 250112})), 250112);
  EXPECT_EQ(rows(build_or_fail("t5-3.9b", {.batch = 1, .seq = 8, .layers = 2, .vocab = 1000})), 1024);  // padded
  EXPECT_EQ(rows(build_or_fail("t5-3.9b", {.shrink = true, .vocab = 1000})), 64);
  EXPECT_FALSE(models::build_model("t5-3.9b", {.batch = 1, .seq = 8, .vocab = -1}));
  // A preset without a token table refuses a vocabulary rather than ignoring it.
  for (const char* vision_or_protein : {"swin-1.8b", "resnet-50", "alphafold2-87m"}) {
    const auto refused = models::build_model(vision_or_protein, {.shrink = true, .vocab = 1000});
    ASSERT_FALSE(refused) << vision_or_protein;
    EXPECT_NE(refused.error().message.find("no token vocabulary"), std::string::npos) << refused.error().message;
  }
}

TEST(T5Graph, EncoderDecoderWiring) {
  const ir::Graph graph = build_or_fail("t5-3.9b", {.batch = 2, .seq = 64, .layers = 4});
  ASSERT_EQ(graph.inputs.size(), 3u);  // input_ids, decoder_input_ids, labels
  EXPECT_NE(find_op(graph, "encoder.layers.1.mlp.fc2"), nullptr);
  EXPECT_EQ(find_op(graph, "encoder.layers.2.attn.sdpa"), nullptr);  // 4 total = 2 + 2
  EXPECT_EQ(testing::count_ops(graph, "scaled_dot_product_attention"), 2u + 2u * 2u);
  // Causality: encoder bidirectional, decoder self-attention causal, cross-attention not.
  EXPECT_FALSE(std::get<bool>(find_op(graph, "encoder.layers.0.attn.sdpa")->attrs.at("causal")));
  EXPECT_TRUE(std::get<bool>(find_op(graph, "decoder.layers.0.self_attn.sdpa")->attrs.at("causal")));
  const ir::Op* cross = find_op(graph, "decoder.layers.1.cross_attn.kv");
  ASSERT_NE(cross, nullptr);
  EXPECT_FALSE(std::get<bool>(find_op(graph, "decoder.layers.1.cross_attn.sdpa")->attrs.at("causal")));
  // Cross-attention keys and values read the encoder output.
  EXPECT_EQ(graph.tensor(cross->inputs[0]).name, "encoder.final_dropout");
  // T5: unscaled attention with the relative position bias [heads s s] of its stack.
  const ir::Op* sdpa = find_op(graph, "encoder.layers.1.attn.sdpa");
  ASSERT_EQ(sdpa->inputs.size(), 4u);
  EXPECT_EQ(graph.tensor(sdpa->inputs[3]).shape, (ir::Shape{32, 64, 64}));
  EXPECT_EQ(std::get<double>(sdpa->attrs.at("scale")), 1.0);
  EXPECT_EQ(find_tensor(graph, "decoder.relative_attention_bias.weight")->shape, (ir::Shape{32, 32}));
  EXPECT_EQ(find_op(graph, "encoder.layers.0.mlp.act")->type, "relu");
  EXPECT_EQ(find_op(graph, "encoder.layers.0.attn_norm")->type, "rms_norm");
  // Tied head over the decoder positions.
  const ir::Op* head = find_op(graph, "lm_head");
  EXPECT_EQ(graph.tensor(head->inputs[1]).name, "shared.weight");
  EXPECT_EQ(graph.tensor(head->outputs[0]).shape, (ir::Shape{2, 64, kT5Vocab}));
  EXPECT_EQ(graph.tensor(graph.loss).shape, ir::Shape{});
  EXPECT_EQ(parameter_count(graph), t5_params(kT5[0], 4));
}

TEST(MbartGraph, PreLayerNormWithLearnedPositions) {
  const ir::Graph graph = build_or_fail("mbart-4.7b", {.batch = 1, .seq = 128, .layers = 2});
  EXPECT_EQ(find_tensor(graph, "encoder.embed_positions.weight")->shape, (ir::Shape{1026, 3072}));
  EXPECT_EQ(find_op(graph, "decoder.layers.0.mlp.act")->type, "gelu");
  EXPECT_EQ(find_op(graph, "decoder.layers.0.self_attn_norm")->type, "layer_norm");
  EXPECT_EQ(graph.tensor(find_op(graph, "decoder.layers.0.cross_attn.sdpa")->outputs[0]).shape,
            (ir::Shape{1, 16, 128, 192}));
  EXPECT_EQ(graph.tensor(find_op(graph, "lm_head")->outputs[0]).shape, (ir::Shape{1, 128, kMbartVocab}));
  EXPECT_EQ(parameter_count(graph), mbart_params(kMbart[0], 2));
}

TEST(EncDecOptions, OptionsAndErrors) {
  const ir::Graph graph = build_or_fail("mbart-9.5b", {.batch = 3, .seq = 256, .dtype = ir::DType::f16, .layers = 6});
  EXPECT_EQ(graph.tensor(graph.inputs[1]).shape, (ir::Shape{3, 256}));
  EXPECT_EQ(testing::count_ops(graph, "scaled_dot_product_attention"), 3u + 3u * 2u);
  for (ir::TensorId p : graph.parameters) EXPECT_EQ(graph.tensor(p).dtype, ir::DType::f16);

  const Expected<ir::Graph> odd = build_model("t5-11b", {.batch = 1, .seq = 16, .layers = 3});
  ASSERT_FALSE(odd.has_value());
  EXPECT_NE(odd.error().message.find("even"), std::string::npos) << odd.error().to_string();
  EXPECT_FALSE(build_model("mbart-20b", {.seq = 2048, .layers = 2}).has_value());
  // T5's relative bias has no length limit.
  EXPECT_TRUE(build_model("t5-3.9b", {.batch = 1, .seq = 2048, .layers = 2}).has_value());
}

TEST(EncDecPresets, EveryPresetValidatesAndDifferentiates) {
  testing::expect_presets_valid_for_training(kT5);
  testing::expect_presets_valid_for_training(kMbart);
}

}  // namespace
}  // namespace loom::models
