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

struct BertShape {
  std::string name;
  std::int64_t layers, hidden, heads, vocab;
  double max_gap;  // allowed distance from the nominal count
};

const std::vector<BertShape> kShapes = {
    {"bert-large", 24, 1024, 16, 30522, 0.02},
    {"bert-1.3b", 24, 2048, 32, 30522, 0.03},
    // Rhino's 162M is not reachable with DNABERT's published architecture (BERT-base, 4101 6-mers):
    // the model has ~89M; the test pins the gap so that a change of reading is deliberate.
    {"dnabert", 12, 768, 12, 4101, 0.46},
};
constexpr std::int64_t kPositions = 512, kTokenTypes = 2;

// Embeddings V·h + P·h + T·h + LayerNorm 2h; per layer 12h² + 13h; MLM head dense h² + h,
// LayerNorm 2h, decoder bias V (decoder weight tied to the word embeddings).
// V is the vocabulary padded to a multiple of 128 (ModelOptions::vocab_multiple), as Megatron-LM pads it.
std::int64_t bert_params(const BertShape& s, std::int64_t layers) {
  const std::int64_t h = s.hidden, v = (s.vocab + 127) / 128 * 128;
  return v * h + kPositions * h + kTokenTypes * h + 2 * h + layers * (12 * h * h + 13 * h) + h * h + h + 2 * h + v;
}

TEST(BertPresets, EveryPresetMatchesTheClosedFormCount) {
  for (const BertShape& s : kShapes) {
    SCOPED_TRACE(s.name);
    const ModelPreset* preset = find_preset(s.name);
    ASSERT_NE(preset, nullptr);
    EXPECT_EQ(preset->family, "bert");
    const ir::Graph graph = build_or_fail(s.name, {.batch = 1, .seq = 16});
    const std::int64_t count = parameter_count(graph);
    EXPECT_EQ(count, bert_params(s, s.layers));
    const double gap = testing::report_gap(*preset, count);
    EXPECT_LT(std::abs(gap), s.max_gap);
  }
}

TEST(BertGraph, PostLayerNormEncoderAndTiedMlmHead) {
  const ir::Graph graph = build_or_fail("bert-large", {.batch = 2, .seq = 128, .layers = 2});
  ASSERT_EQ(graph.inputs.size(), 3u);  // input_ids, token_type_ids, labels
  // Post-LN: the norm reads the residual sum, and the next block reads the norm.
  const ir::Op* norm = find_op(graph, "layers.0.attn_norm");
  ASSERT_NE(norm, nullptr);
  EXPECT_EQ(norm->type, "layer_norm");
  EXPECT_EQ(graph.tensor(norm->inputs[0]).name, "layers.0.attn_residual");
  EXPECT_EQ(graph.tensor(find_op(graph, "layers.1.attn.qkv")->inputs[0]).name, "layers.0.mlp_norm");
  EXPECT_EQ(std::get<double>(norm->attrs.at("eps")), 1e-12);
  // Bidirectional attention.
  EXPECT_FALSE(std::get<bool>(find_op(graph, "layers.1.attn.sdpa")->attrs.at("causal")));
  // MLM head over every position, decoder tied to the word embeddings.
  const ir::Op* decoder = find_op(graph, "mlm.decoder");
  ASSERT_NE(decoder, nullptr);
  EXPECT_EQ(graph.tensor(decoder->inputs[1]).name, "embeddings.word.weight");
  EXPECT_EQ(graph.tensor(decoder->inputs[2]).name, "mlm.decoder.bias");
  EXPECT_EQ(graph.tensor(decoder->outputs[0]).shape, (ir::Shape{2, 128, 30592}));  // 30522 padded
  EXPECT_EQ(find_op(graph, "mlm.act")->type, "gelu");
  EXPECT_EQ(find_op(graph, "loss")->type, "cross_entropy_from_parts");
  EXPECT_EQ(graph.tensor(graph.loss).shape, ir::Shape{});
  EXPECT_EQ(parameter_count(graph), bert_params(kShapes[0], 2));
}

TEST(BertGraph, DnabertUsesTheSixMerVocabulary) {
  const ir::Graph graph = build_or_fail("dnabert", {.batch = 4, .seq = 512, .layers = 1});
  EXPECT_EQ(find_tensor(graph, "embeddings.word.weight")->shape, (ir::Shape{4224, 768}));  // 4101 padded
  EXPECT_EQ(graph.tensor(find_op(graph, "mlm.decoder")->outputs[0]).shape, (ir::Shape{4, 512, 4224}));
  // Without padding, the tokenizer's 4101 6-mers.
  const ir::Graph unpadded = build_or_fail("dnabert", {.batch = 4, .seq = 512, .layers = 1, .vocab_multiple = 1});
  EXPECT_EQ(find_tensor(unpadded, "embeddings.word.weight")->shape, (ir::Shape{4101, 768}));
}

TEST(BertOptions, OptionsAndLimits) {
  const ir::Graph graph = build_or_fail("bert-1.3b", {.batch = 8, .seq = 256, .dtype = ir::DType::f32, .layers = 3});
  EXPECT_EQ(graph.tensor(graph.inputs[0]).shape, (ir::Shape{8, 256}));
  EXPECT_EQ(testing::count_ops(graph, "scaled_dot_product_attention"), 3u);
  for (ir::TensorId p : graph.parameters) EXPECT_EQ(graph.tensor(p).dtype, ir::DType::f32);
  // Defaults: Oases' global batch 128, seq 512.
  const ir::Graph defaults = build_or_fail("bert-1.3b", {.layers = 1});
  EXPECT_EQ(defaults.tensor(defaults.inputs[0]).shape, (ir::Shape{128, 512}));
  // The learned position table has 512 rows.
  const Expected<ir::Graph> too_long = build_model("bert-large", {.seq = 1024});
  ASSERT_FALSE(too_long.has_value());
  EXPECT_NE(too_long.error().message.find("512"), std::string::npos) << too_long.error().to_string();
}

TEST(BertPresets, EveryPresetValidatesAndDifferentiates) {
  testing::expect_presets_valid_for_training(kShapes);
}

}  // namespace
}  // namespace loom::models
