#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "lm_test_support.h"

namespace loom::models {
namespace {

using testing::build_or_fail;
using testing::find_op;
using testing::find_tensor;
using testing::parameter_count;
using testing::relative_gap;

struct GptShape {
  std::string name;
  std::int64_t layers, hidden, heads, head_dim, context;
};

// Transcribed from REFERENCE.md / the papers' tables (not from gpt.cc), with the two readings the
// model file documents: gpt3-1.3b has 16 heads of 128, gpt3-13b has 40 heads of 128 in a 5140 stream.
const std::vector<GptShape> kShapes = {
    {"gpt3-125m", 12, 768, 12, 64, 2048},        {"gpt3-350m", 24, 1024, 16, 64, 2048},
    {"gpt3-760m", 24, 1536, 16, 96, 2048},       {"gpt3-1.3b", 24, 2048, 16, 128, 2048},
    {"gpt3-2.7b", 32, 2560, 32, 80, 2048},       {"gpt3-6.7b", 32, 4096, 32, 128, 2048},
    {"gpt3-13b", 40, 5140, 40, 128, 2048},       {"gpt3-175b", 96, 12288, 96, 128, 2048},
    {"gpt-medium", 24, 1024, 16, 64, 2048},      {"gpt-large", 24, 1536, 16, 96, 2048},
    {"gpt-xl", 24, 2048, 32, 64, 2048},          {"gpt-2.7b", 32, 2560, 32, 80, 2048},
    {"gpt-6.7b", 32, 4096, 32, 128, 2048},       {"gpt3-1.3b-16k", 24, 2048, 32, 64, 16384},
    {"gpt3-2.6b-16k", 32, 2560, 32, 80, 16384},  {"gpt3-6.7b-16k", 32, 4096, 32, 128, 16384},
    {"gpt3-15b-16k", 48, 5120, 32, 160, 16384},
};
// GPT-2/3's 50257 tokens padded to a multiple of 128, as Megatron-LM does (ModelOptions::vocab_multiple).
constexpr std::int64_t kVocab = 50304;

// Per layer: qkv h·3w + 3w, out w·h + h, fc1 4h·h + 4h, fc2 4h·h + h, two LayerNorms 4h (w = a·d).
// Plus wte V·h (tied head), wpe n_ctx·h, ln_f 2h.
std::int64_t gpt_params(std::int64_t L, std::int64_t h, std::int64_t w, std::int64_t ctx) {
  const std::int64_t layer = 4 * h * w + 3 * w + h + 8 * h * h + 5 * h + 4 * h;
  return L * layer + kVocab * h + ctx * h + 2 * h;
}

// The textbook form, valid when w = h.
std::int64_t gpt_params_textbook(std::int64_t L, std::int64_t h, std::int64_t ctx) {
  return 12 * L * h * h + 13 * L * h + kVocab * h + ctx * h + 2 * h;
}

TEST(GptPresets, EveryPresetBuildsWithTheClosedFormParameterCount) {
  for (const GptShape& s : kShapes) {
    SCOPED_TRACE(s.name);
    const ModelPreset* preset = find_preset(s.name);
    ASSERT_NE(preset, nullptr);
    EXPECT_EQ(preset->family, "gpt");
    EXPECT_EQ(preset->default_seq, s.context);
    // One layer and a short sequence keep the test fast; the count is the full formula at L = 1.
    const ir::Graph graph = build_or_fail(s.name, {.batch = 1, .seq = 16, .layers = 1});
    ASSERT_FALSE(graph.ops.empty());
    EXPECT_EQ(parameter_count(graph), gpt_params(1, s.hidden, s.heads * s.head_dim, s.context));
  }
}

TEST(GptPresets, FullDepthCountsMatchTheFormulaAndTheNames) {
  struct Case {
    std::string name;
    std::int64_t exact;
  };
  // Exact counts of the architecture (hand-checked against the formulas above), with the vocabulary
  // padded to 50304: 47 h more than with the tokenizer's 50257.
  const std::vector<Case> cases = {
      {"gpt3-125m", 125'262'336},      {"gpt3-350m", 355'919'872},     {"gpt3-760m", 760'372'224},
      {"gpt3-1.3b", 1'315'819'520},    {"gpt3-2.7b", 2'651'673'600},   {"gpt3-6.7b", 6'658'596'864},
      {"gpt3-13b", 12'936'729'960},    {"gpt3-175b", 174'604'836'864},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const GptShape& s =
        *std::find_if(kShapes.begin(), kShapes.end(), [&](const GptShape& x) { return x.name == c.name; });
    const ir::Graph graph = build_or_fail(c.name, {.batch = 1, .seq = 8});
    const std::int64_t count = parameter_count(graph);
    EXPECT_EQ(count, c.exact);
    EXPECT_EQ(count, gpt_params(s.layers, s.hidden, s.heads * s.head_dim, s.context));
    if (s.heads * s.head_dim == s.hidden) {
      EXPECT_EQ(count, gpt_params_textbook(s.layers, s.hidden, s.context));
    }
    const double gap = relative_gap(static_cast<double>(count), find_preset(c.name)->nominal_params);
    // 350M, 1.3B and 2.7B are rounded names in the paper: +1.7 %, +1.2 %, -1.8 %.
    const bool rounded_name = c.name == "gpt3-350m" || c.name == "gpt3-1.3b" || c.name == "gpt3-2.7b";
    EXPECT_LT(std::abs(gap), rounded_name ? 0.02 : 0.01) << "gap " << gap;
  }
}

TEST(GptGraph, LogitsLossAndOpNames) {
  const ir::Graph graph = build_or_fail("gpt3-125m", {.batch = 2, .seq = 64});
  const ir::Op* head = find_op(graph, "lm_head");
  ASSERT_NE(head, nullptr);
  EXPECT_EQ(head->type, "linear");
  EXPECT_EQ(graph.tensor(head->outputs[0]).shape, (ir::Shape{2, 64, kVocab}));
  // Tied: the head's weight is the token embedding, and there is no separate head parameter.
  ASSERT_EQ(head->inputs.size(), 2u);
  EXPECT_EQ(graph.tensor(head->inputs[1]).name, "wte.weight");
  EXPECT_EQ(find_tensor(graph, "lm_head.weight"), nullptr);

  ASSERT_TRUE(graph.loss.valid());
  EXPECT_EQ(graph.tensor(graph.loss).shape, ir::Shape{});
  EXPECT_EQ(graph.tensor(graph.loss).dtype, ir::DType::f32);
  const ir::Op* loss = find_op(graph, "loss");
  ASSERT_NE(loss, nullptr);
  EXPECT_EQ(loss->type, "cross_entropy_from_parts");  // the last of the vocabulary-splittable parts

  for (const char* name : {"wte", "wpe", "embed", "layers.0.ln1", "layers.0.attn.qkv", "layers.0.attn.sdpa",
                           "layers.0.attn.out", "layers.0.attn_residual", "layers.0.ln2", "layers.0.mlp.fc1",
                           "layers.0.mlp.act", "layers.0.mlp.fc2", "layers.11.mlp_residual", "ln_f"})
    EXPECT_NE(find_op(graph, name), nullptr) << name;
  EXPECT_EQ(find_op(graph, "layers.12.ln1"), nullptr);
  EXPECT_EQ(graph.tensor(find_op(graph, "layers.0.attn.qkv")->outputs[0]).shape, (ir::Shape{2, 64, 3 * 768}));

  const ir::Op* sdpa = find_op(graph, "layers.3.attn.sdpa");
  ASSERT_NE(sdpa, nullptr);
  EXPECT_EQ(std::get<bool>(sdpa->attrs.at("causal")), true);
  EXPECT_DOUBLE_EQ(std::get<double>(sdpa->attrs.at("scale")), 0.125);  // 1/sqrt(64)
  EXPECT_EQ(graph.tensor(sdpa->inputs[0]).shape, (ir::Shape{2, 12, 64, 64}));
  EXPECT_EQ(graph.tensor(sdpa->outputs[0]).shape, (ir::Shape{2, 12, 64, 64}));

  const ir::FullTensor* qkv_weight = find_tensor(graph, "layers.5.attn.qkv.weight");
  ASSERT_NE(qkv_weight, nullptr);
  EXPECT_EQ(qkv_weight->role, ir::TensorRole::parameter);
  EXPECT_EQ(qkv_weight->shape, (ir::Shape{3 * 768, 768}));
  EXPECT_EQ(qkv_weight->dtype, ir::DType::bf16);
}

TEST(GptGraph, Gpt13bKeepsA5140StreamWith40HeadsOf128) {
  const ir::Graph graph = build_or_fail("gpt3-13b", {.batch = 1, .seq = 32, .layers = 1});
  EXPECT_EQ(find_tensor(graph, "layers.0.attn.qkv.weight")->shape, (ir::Shape{3 * 5120, 5140}));
  EXPECT_EQ(find_tensor(graph, "layers.0.attn.out.weight")->shape, (ir::Shape{5140, 5120}));
  EXPECT_EQ(graph.tensor(find_op(graph, "layers.0.attn.sdpa")->outputs[0]).shape, (ir::Shape{1, 40, 32, 128}));
}

TEST(GptOptions, BatchSeqLayersAndDtypeShapeTheGraph) {
  const ir::Graph small = build_or_fail("gpt3-350m", {.batch = 3, .seq = 128, .dtype = ir::DType::f32, .layers = 2});
  ASSERT_EQ(small.inputs.size(), 2u);
  EXPECT_EQ(small.tensor(small.inputs[0]).shape, (ir::Shape{3, 128}));
  EXPECT_EQ(small.tensor(small.inputs[0]).dtype, ir::DType::i64);
  EXPECT_EQ(testing::count_ops(small, "scaled_dot_product_attention"), 2u);
  EXPECT_EQ(parameter_count(small), gpt_params(2, 1024, 1024, 2048));  // the position table keeps n_ctx rows
  for (ir::TensorId p : small.parameters) EXPECT_EQ(small.tensor(p).dtype, ir::DType::f32);
  EXPECT_EQ(small.tensor(find_op(small, "lm_head")->outputs[0]).shape, (ir::Shape{3, 128, kVocab}));
  // The tokenizer's vocabulary without Megatron's padding; a multiple out of range is refused.
  const ir::Graph unpadded = build_or_fail("gpt3-350m", {.batch = 1, .seq = 8, .layers = 1, .vocab_multiple = 1});
  EXPECT_EQ(unpadded.tensor(find_op(unpadded, "lm_head")->outputs[0]).shape, (ir::Shape{1, 8, 50257}));
  EXPECT_FALSE(build_model("gpt3-350m", {.batch = 1, .seq = 8, .layers = 1, .vocab_multiple = 0}));

  // Defaults: the paper's batch (0.5M tokens = 256 sequences) and n_ctx.
  const ir::Graph full = build_or_fail("gpt3-350m", {.layers = 1});
  EXPECT_EQ(full.tensor(full.inputs[0]).shape, (ir::Shape{256, 2048}));

  // The long-sequence presets take seq 16384.
  const ir::Graph long_seq = build_or_fail("gpt3-1.3b-16k", {.batch = 1, .layers = 1});
  EXPECT_EQ(long_seq.tensor(long_seq.inputs[0]).shape, (ir::Shape{1, 16384}));
}

TEST(GptOptions, BadOptionsAreErrors) {
  const Expected<ir::Graph> too_long = build_model("gpt3-125m", {.seq = 4096});
  ASSERT_FALSE(too_long.has_value());
  EXPECT_NE(too_long.error().message.find("4096"), std::string::npos) << too_long.error().to_string();
  EXPECT_NE(too_long.error().message.find("gpt3-125m"), std::string::npos);
  EXPECT_FALSE(build_model("gpt3-125m", {.batch = -1}).has_value());
  EXPECT_FALSE(build_model("gpt3-125b", {}).has_value());
}

// 3 x forward FLOPs (backward = 2 x forward) against the standard estimate
// 6·N·tokens + 12·L·h·s·tokens (REFERENCE.md, Formulas).
TEST(GptFlops, ThreeForwardPassesMatchSixNDPlusAttention) {
  struct Case {
    std::string name;
    std::int64_t layers, hidden;
  };
  for (const Case& c : {Case{"gpt3-175b", 96, 12288}, Case{"gpt3-6.7b", 32, 4096}}) {
    SCOPED_TRACE(c.name);
    const std::int64_t seq = 2048;
    const ir::Graph graph = build_or_fail(c.name, {.batch = 1, .seq = seq});
    const double tokens = static_cast<double>(seq);
    const double n = static_cast<double>(parameter_count(graph));
    const double forward = testing::total_forward_flops(graph);
    const double estimate = 6 * n * tokens + 12.0 * c.layers * c.hidden * seq * tokens;
    const double gap = relative_gap(3 * forward, estimate);
    RecordProperty("forward_flops_" + c.name, std::to_string(forward));
    std::printf("%s: forward %.6e FLOPs, 3x forward %.6e, 6ND + 12Lhs·D %.6e, gap %+.4f%%\n", c.name.c_str(), forward,
                3 * forward, estimate, 100 * gap);
    EXPECT_LT(std::abs(gap), 0.01);
  }
}

TEST(GptPresets, EveryPresetValidatesAndDifferentiates) {
  testing::expect_presets_valid_for_training(kShapes);
}

}  // namespace
}  // namespace loom::models
