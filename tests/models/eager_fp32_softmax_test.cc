// Eager attention with Megatron-LM v3's fp32 softmax (AttentionImpl::eager_fp32_softmax, transformer_blocks.h):
// the casts and the fp32 score tensors it builds in a 16-bit model, the query-key layer scaling coefficient
// that leaves the logits unchanged, what its backward keeps against the plain eager form, and that an fp32
// model has nothing to cast.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "model_test_support.h"

namespace loom::models {
namespace {

using testing::build_or_fail;
using testing::count_ops;
using testing::find_op;

std::int64_t saved_bytes(const ir::Graph& forward) {
  return static_cast<std::int64_t>(testing::training_stats(forward).saved_activation_bytes);
}

ir::DType output_dtype(const ir::Graph& graph, const std::string& op) {
  const ir::Op* found = find_op(graph, op);
  EXPECT_NE(found, nullptr) << op;
  return found == nullptr ? ir::DType::f64 : graph.tensor(found->outputs.at(0)).dtype;
}

double factor(const ir::Graph& graph, const std::string& op) {
  const ir::Op* found = find_op(graph, op);
  EXPECT_NE(found, nullptr) << op;
  return found == nullptr ? 0.0 : std::get<double>(found->attrs.at("factor"));
}

TEST(EagerFp32Softmax, CastsTheScoresToFp32AroundTheSoftmaxInA16BitModel) {
  for (ir::DType dtype : {ir::DType::f16, ir::DType::bf16}) {
    SCOPED_TRACE(ir::name(dtype));
    const ModelOptions options{.batch = 2, .seq = 32, .dtype = dtype, .layers = 2,
                               .attention = AttentionImpl::eager_fp32_softmax};
    const ir::Graph gpt = build_or_fail("gpt3-125m", options);
    EXPECT_EQ(count_ops(gpt, "cast"), 4u);  // two per layer
    EXPECT_EQ(output_dtype(gpt, "layers.0.attn.scores"), dtype);
    EXPECT_EQ(output_dtype(gpt, "layers.0.attn.scores_fp32"), ir::DType::f32);
    EXPECT_EQ(output_dtype(gpt, "layers.0.attn.scores_scaled"), ir::DType::f32);
    EXPECT_EQ(output_dtype(gpt, "layers.0.attn.causal_mask"), ir::DType::f32);
    EXPECT_EQ(output_dtype(gpt, "layers.0.attn.probs"), ir::DType::f32);
    EXPECT_EQ(output_dtype(gpt, "layers.0.attn.probs_half"), dtype);
    EXPECT_EQ(output_dtype(gpt, "layers.0.attn.attn_dropout"), dtype);
    // The dropout reads the 16-bit copy, not the fp32 probabilities.
    const ir::Op* dropout = find_op(gpt, "layers.1.attn.attn_dropout");
    ASSERT_NE(dropout, nullptr);
    EXPECT_EQ(dropout->inputs.at(0), find_op(gpt, "layers.1.attn.probs_half")->outputs.at(0));
  }
}

TEST(EagerFp32Softmax, QueryKeyLayerScalingMovesTheLayerNumberFromQToTheFp32Scores) {
  const ir::Graph gpt = build_or_fail("gpt3-125m", {.batch = 1, .seq = 16, .dtype = ir::DType::f16, .layers = 3,
                                                    .attention = AttentionImpl::eager_fp32_softmax});
  const double scale = 1.0 / std::sqrt(64.0);  // gpt3-125m: 12 heads of 64
  for (int layer = 0; layer < 3; ++layer) {
    SCOPED_TRACE(layer);
    const std::string scope = "layers." + std::to_string(layer) + ".attn.";
    const double c = layer + 1;
    EXPECT_DOUBLE_EQ(factor(gpt, scope + "q_scaled"), scale / c);
    EXPECT_DOUBLE_EQ(factor(gpt, scope + "scores_scaled"), c);
    EXPECT_DOUBLE_EQ(factor(gpt, scope + "q_scaled") * factor(gpt, scope + "scores_scaled"), scale);
  }
  // The plain eager form keeps the whole scale on q and has no fp32 ops.
  const ir::Graph eager = build_or_fail("gpt3-125m", {.batch = 1, .seq = 16, .dtype = ir::DType::f16, .layers = 3,
                                                      .attention = AttentionImpl::eager});
  EXPECT_DOUBLE_EQ(factor(eager, "layers.2.attn.q_scaled"), scale);
  EXPECT_EQ(find_op(eager, "layers.2.attn.scores_scaled"), nullptr);
  EXPECT_EQ(count_ops(eager, "cast"), 0u);
}

TEST(EagerFp32Softmax, SavesFp32ProbabilitiesAndDropoutsInputBeyondTheEagerForm) {
  // Per layer and score element [b h s t]: eager keeps the 16-bit probabilities and the dropped ones (2 + 2);
  // eager-fp32 the fp32 probabilities, dropout's 16-bit input and the dropped ones (4 + 2 + 2).
  const std::int64_t batch = 2, seq = 64, layers = 2, heads = 12;
  const ModelOptions eager_options{.batch = batch, .seq = seq, .dtype = ir::DType::f16, .layers = layers,
                                   .attention = AttentionImpl::eager};
  ModelOptions fp32_options = eager_options;
  fp32_options.attention = AttentionImpl::eager_fp32_softmax;
  const std::int64_t eager = saved_bytes(build_or_fail("gpt3-125m", eager_options));
  const std::int64_t fp32 = saved_bytes(build_or_fail("gpt3-125m", fp32_options));
  EXPECT_EQ(fp32 - eager, layers * batch * heads * seq * seq * (8 - 4));
}

TEST(EagerFp32Softmax, AnFp32ModelHasNothingToCastAndKeepsWhatEagerKeeps) {
  ModelOptions options{.batch = 1, .seq = 32, .dtype = ir::DType::f32, .layers = 2, .attention = AttentionImpl::eager};
  const ir::Graph eager = build_or_fail("gpt3-125m", options);
  options.attention = AttentionImpl::eager_fp32_softmax;
  const ir::Graph fp32 = build_or_fail("gpt3-125m", options);
  EXPECT_EQ(count_ops(fp32, "cast"), 0u);
  EXPECT_EQ(count_ops(fp32, "scale"), count_ops(eager, "scale") + 2);  // scores_scaled, one per layer
  EXPECT_EQ(saved_bytes(fp32), saved_bytes(eager));
}

TEST(EagerFp32Softmax, ParsesItsNameAndModelsWithoutAttentionRefuseIt) {
  EXPECT_EQ(name(AttentionImpl::eager_fp32_softmax), "eager-fp32");
  EXPECT_EQ(parse_attention_impl("eager-fp32"), AttentionImpl::eager_fp32_softmax);
  Expected<ir::Graph> resnet = build_model("resnet-50", {.shrink = true, .attention = AttentionImpl::eager_fp32_softmax});
  ASSERT_FALSE(resnet);
  EXPECT_NE(resnet.error().hint.find("drop --attention eager-fp32"), std::string::npos) << resnet.error().hint;
  Expected<AttentionImpl> bad = parse_attention_impl("fp32");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().hint.find("eager-fp32"), std::string::npos);
}

}  // namespace
}  // namespace loom::models
