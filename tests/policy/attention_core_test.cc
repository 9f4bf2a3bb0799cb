// The eager attention core (policy/attention_core.h): found by the graph's structure in every eager form of
// every family built on transformer_blocks and under any naming; none in a fused kernel or a router's softmax.
#include "loom/policy/attention_core.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

#include "loom/ir/graph_builder.h"
#include "loom/models/zoo.h"
#include "loom/ops/registry.h"
#include "loom/policy/stages.h"

namespace loom::policy {
namespace {

using Names = std::set<std::string>;

// The core ops' names without their layer prefix, by layer.
std::map<std::string, Names> core_names(const ir::Graph& graph) {
  const std::vector<char> in_core = attention_core_ops(graph, ops::builtin_ops());
  std::map<std::string, Names> names;
  for (const ir::Op& op : graph.ops)
    if (in_core[op.id.index()]) {
      const std::string_view layer = layer_of(op.name);
      names[std::string(layer)].insert(op.name.substr(layer.size() + 1));
    }
  return names;
}

ir::Graph built(std::string_view preset, models::AttentionImpl impl) {
  auto graph = models::build_model(preset, {.dtype = ir::DType::f16, .shrink = true, .attention = impl});
  EXPECT_TRUE(graph) << preset << ": " << graph.error().to_string();
  return graph.value_or(ir::Graph{});
}

// Megatron-LM's CoreAttention in the builders' ops: q·kᵀ to the merged context; q's scale (baddbmm's alpha in
// Megatron) and the grouped-query view of q stay outside, their outputs being q's bytes again.
Names expected_core(std::string_view prefix, models::AttentionImpl impl, bool causal, bool dropout, bool bias,
                    bool grouped) {
  Names names{"scores", "probs", "context", "merge_heads.transpose", "merge_heads"};
  if (impl == models::AttentionImpl::eager_fp32_softmax) names.insert({"scores_fp32", "scores_scaled", "probs_half"});
  if (causal) names.insert("causal_mask");
  if (dropout) names.insert("attn_dropout");
  if (bias) names.insert("scores_bias");
  if (grouped) names.insert("context_heads");
  Names prefixed;
  for (const std::string& n : names) prefixed.insert(std::string(prefix) + "." + n);
  return prefixed;
}

TEST(AttentionCore, FoundInEveryLayerOfEveryEagerFamily) {
  using models::AttentionImpl;
  for (const AttentionImpl impl : {AttentionImpl::eager, AttentionImpl::eager_fp32_softmax}) {
    SCOPED_TRACE(std::string(models::name(impl)));
    const auto gpt = core_names(built("gpt3-125m", impl));
    ASSERT_EQ(gpt.size(), 2u);
    for (const auto& [layer, names] : gpt) EXPECT_EQ(names, expected_core("attn", impl, true, true, false, false));
    // Grouped-query heads (llama3: kv 8 of 32) and no attention dropout.
    for (const auto& [layer, names] : core_names(built("llama3-8b", impl)))
      EXPECT_EQ(names, expected_core("attn", impl, true, false, false, true)) << layer;
    // Encoder and decoder layers: T5's relative-position bias on self-attention, cross-attention unmasked.
    const auto t5 = core_names(built("t5-3.9b", impl));
    ASSERT_EQ(t5.size(), 2u);
    EXPECT_EQ(t5.at("encoder.layers.0"), expected_core("attn", impl, false, true, true, false));
    Names decoder = expected_core("self_attn", impl, true, true, true, false);
    decoder.merge(expected_core("cross_attn", impl, false, true, false, false));
    EXPECT_EQ(t5.at("decoder.layers.0"), decoder);
    // Swin's window attention under its two-level layer names, with the relative-position bias.
    const auto swin = core_names(built("swin-1.8b", impl));
    EXPECT_EQ(swin.size(), 4u);
    for (const auto& [layer, names] : swin) EXPECT_EQ(names, expected_core("attn", impl, false, false, true, false));
    for (const char* preset : {"bert-large", "mbart-4.7b", "moe-380m"})
      EXPECT_FALSE(core_names(built(preset, impl)).empty()) << preset;
  }
  for (const char* preset : {"gpt3-125m", "llama3-8b", "t5-3.9b", "swin-1.8b", "moe-380m"})
    EXPECT_TRUE(core_names(built(preset, AttentionImpl::fused)).empty()) << preset;
}

// Another naming and spelling (a traced HuggingFace attention's: matmuls, kᵀ by transpose, a broadcast additive
// mask, dropout), next to a router's softmax over a linear's logits, which is not attention.
TEST(AttentionCore, FollowsTheStructureNotTheNames) {
  ir::GraphBuilder b("hand", ops::builtin_ops());
  const ir::DType f32 = ir::DType::f32;
  const ir::TensorId x = b.input("x", {2, 4, 8, 16}, f32), mask = b.input("mask", {1, 1, 8, 8}, f32);
  const auto scaled = [&](const std::string& name, double factor) {
    return b.op("scale", name, {x}, ir::Attrs{{"factor", factor}});
  };
  const ir::TensorId q = scaled("blocks.0.mix.q", 0.25), k = scaled("blocks.0.mix.k", 2), v = scaled("blocks.0.mix.v", 3);
  const ir::TensorId kt = b.op("transpose", "blocks.0.mix.kt", {k}, ir::Attrs{{"dim0", std::int64_t{2}}, {"dim1", std::int64_t{3}}});
  ir::TensorId t = b.op("matmul", "blocks.0.mix.mm1", {q, kt});
  t = b.op("add", "blocks.0.mix.masked", {t, mask});
  t = b.op("softmax", "blocks.0.mix.sm", {t}, ir::Attrs{{"dim", std::int64_t{-1}}});
  t = b.op("dropout", "blocks.0.mix.drop", {t}, ir::Attrs{{"p", 0.1}});
  t = b.op("matmul", "blocks.0.mix.mm2", {t, v});
  t = b.op("transpose", "blocks.0.mix.heads_last", {t}, ir::Attrs{{"dim0", std::int64_t{1}}, {"dim1", std::int64_t{2}}});
  t = b.op("reshape", "blocks.0.mix.merged", {t}, ir::Attrs{{"shape", std::vector<std::int64_t>{2, 8, 64}}});
  const ir::TensorId logits = b.op("linear", "blocks.0.router", {t, b.parameter("blocks.0.router.weight", {4, 64}, f32)});
  const ir::TensorId gates = b.op("softmax", "blocks.0.gates", {logits}, ir::Attrs{{"dim", std::int64_t{-1}}});
  b.op("matmul", "blocks.0.mixed", {gates, b.op("transpose", "blocks.0.gates_t", {gates},
                                                 ir::Attrs{{"dim0", std::int64_t{1}}, {"dim1", std::int64_t{2}}})});
  auto graph = std::move(b).finish();
  ASSERT_TRUE(graph) << graph.error().to_string();
  const auto names = core_names(*graph);
  ASSERT_EQ(names.size(), 1u);
  EXPECT_EQ(names.at("blocks.0"),
            (Names{"mix.mm1", "mix.masked", "mix.sm", "mix.drop", "mix.mm2", "mix.heads_last", "mix.merged"}));
}

}  // namespace
}  // namespace loom::policy
