// Eager attention (ModelOptions::attention, transformer_blocks.h): the ops it builds in place of the fused
// scaled_dot_product_attention, the activations its backward keeps against the fused op's, and the
// models that refuse it.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "model_test_support.h"

namespace loom::models {
namespace {

using testing::build_or_fail;
using testing::count_ops;
using testing::find_op;
using testing::training_stats;

std::int64_t bytes_of(const ir::Graph& graph, ir::TensorId id) { return graph.tensor(id).bytes(); }

// What the eager form keeps beyond the fused form, per attention op of the fused graph: its [b hq s t]
// probabilities (softmax's output, which dropout reads too) and, where the block has attention dropout, the
// dropped probabilities (read by the product with v); less the output the fused op keeps for its backward
// and its additive bias (each bias tensor once: T5's layers share theirs), which the eager add does not keep.
// q (scaled), k and v are kept by both forms at the same sizes.
std::int64_t expected_extra_bytes(const ir::Graph& fused, const ir::Graph& eager) {
  std::int64_t extra = 0;
  std::set<std::uint32_t> biases;
  for (const ir::Op& op : fused.ops) {
    if (op.type == "scaled_dot_product_attention" && op.inputs.size() == 4 && biases.insert(op.inputs[3].value).second)
      extra -= bytes_of(fused, op.inputs[3]);
    if (op.type != "scaled_dot_product_attention") continue;
    const ir::Shape& q = fused.tensor(op.inputs[0]).shape;
    const ir::Shape& k = fused.tensor(op.inputs[1]).shape;
    const std::int64_t scores = q[0] * q[1] * q[2] * k[2] * ir::size_bytes(fused.tensor(op.inputs[0]).dtype);
    const std::string scope = op.name.substr(0, op.name.size() - std::string("sdpa").size());
    EXPECT_NE(find_op(eager, scope + "probs"), nullptr) << scope;
    const bool dropped = find_op(eager, scope + "attn_dropout") != nullptr;
    extra += (dropped ? 2 : 1) * scores - bytes_of(fused, op.outputs[0]);
  }
  return extra;
}

TEST(EagerAttention, SavesTheScoreTensorsTheFusedKernelDoesNot) {
  // GPT (Megatron's attention dropout), LLaMA (grouped-query, causal, rotary), T5 (bias, cross-attention,
  // dropout) and Swin (window attention with a bias, no dropout).
  const std::vector<std::pair<std::string, ModelOptions>> cases = {
      {"gpt3-125m", {.batch = 2, .seq = 64, .dtype = ir::DType::f16, .layers = 2}},
      {"llama3-8b", {.batch = 1, .seq = 256, .layers = 2}},
      {"t5-3.9b", {.batch = 1, .seq = 16, .layers = 2, .shrink = true}},
      {"swin-1.8b", {.batch = 1, .seq = 384, .layers = 8}},
  };
  for (auto [preset, options] : cases) {
    SCOPED_TRACE(preset);
    const ir::Graph fused = build_or_fail(preset, options);
    options.attention = AttentionImpl::eager;
    const ir::Graph eager = build_or_fail(preset, options);
    const std::size_t attentions = count_ops(fused, "scaled_dot_product_attention");
    ASSERT_GT(attentions, 0u);
    EXPECT_EQ(count_ops(eager, "scaled_dot_product_attention"), 0u);
    EXPECT_EQ(count_ops(eager, "softmax"), attentions);
    EXPECT_EQ(count_ops(eager, "einsum"), 2 * attentions);

    const ir::GraphStats f = training_stats(fused), e = training_stats(eager);
    const std::int64_t extra = expected_extra_bytes(fused, eager);
    EXPECT_GT(extra, 0);
    EXPECT_EQ(static_cast<std::int64_t>(e.saved_activation_bytes - f.saved_activation_bytes), extra);
    EXPECT_EQ(e.parameter_count, f.parameter_count);
  }
}

TEST(EagerAttention, GptCarriesMegatronsAttentionDropoutAndTheCausalMask) {
  ModelOptions options{.batch = 1, .seq = 16, .layers = 1, .attention = AttentionImpl::eager};
  const ir::Graph gpt = build_or_fail("gpt3-125m", options);
  EXPECT_NE(find_op(gpt, "layers.0.attn.causal_mask"), nullptr);
  const ir::Op* dropout = find_op(gpt, "layers.0.attn.attn_dropout");
  ASSERT_NE(dropout, nullptr);
  EXPECT_EQ(std::get<double>(dropout->attrs.at("p")), 0.1);
  // T5's encoder attends both ways: no mask.
  const ir::Graph t5 = build_or_fail("t5-3.9b", {.layers = 2, .shrink = true, .attention = AttentionImpl::eager});
  EXPECT_EQ(count_ops(t5, "causal_mask"), 1u);  // the decoder's self-attention only
}

TEST(EagerAttention, ModelsWithoutAttentionRefuseItAndBadNamesFail) {
  for (const char* preset : {"resnet-50", "alphafold2-87m"}) {
    Expected<ir::Graph> graph = build_model(preset, {.shrink = true, .attention = AttentionImpl::eager});
    ASSERT_FALSE(graph) << preset;
    EXPECT_NE(graph.error().message.find("no scaled dot-product attention"), std::string::npos)
        << graph.error().message;
    EXPECT_NE(graph.error().hint.find("drop --attention eager"), std::string::npos);
  }
  for (AttentionImpl impl : {AttentionImpl::fused, AttentionImpl::eager}) EXPECT_EQ(parse_attention_impl(name(impl)), impl);
  Expected<AttentionImpl> bad = parse_attention_impl("flash");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("'flash'"), std::string::npos);
}

}  // namespace
}  // namespace loom::models
