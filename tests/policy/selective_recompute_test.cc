// Megatron-LM's selective recomputation on eager attention (policy/recompute_policy.h,
// policy/attention_core.h): what each layer keeps from its forward pass for its backward pass.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "loom/plan/recompute.h"
#include "loom/policy/attention_core.h"
#include "loom/policy/recompute_policy.h"
#include "loom/policy/stages.h"
#include "policy_test_support.h"

namespace loom::policy {
namespace {

// The activation buffers device 0 holds when its first backward op runs (one micro-batch, no pipeline:
// what the forward pass saved for the backward pass), by tensor.
std::map<ir::TensorId, std::int64_t> saved_at_the_turn(const exec::ExecPlan& exec) {
  const ir::Graph& graph = *exec.plan->graph;
  std::map<exec::BufferId, ir::TensorId> live;
  const auto add = [&](exec::BufferId b) {
    const ir::TensorId t = exec.buffer(b).piece.tensor;
    if (graph.tensor(t).role == ir::TensorRole::activation) live.emplace(b, t);
  };
  for (const exec::Instruction& instruction : exec.programs[0]) {
    if (const auto* c = std::get_if<exec::Compute>(&instruction)) {
      if (exec.plan->op_of(c->sub_op).pass == ir::Pass::backward) break;
      for (exec::BufferId b : c->outputs) add(b);
    } else if (const auto* col = std::get_if<exec::Collective>(&instruction)) {
      add(col->output);
    } else if (const auto* r = std::get_if<exec::Recv>(&instruction)) {
      add(r->buffer);
    } else if (const auto* l = std::get_if<exec::Local>(&instruction)) {
      add(l->output);
    } else if (const auto* f = std::get_if<exec::Free>(&instruction)) {
      live.erase(f->buffer);
    }
  }
  std::map<ir::TensorId, std::int64_t> saved;
  for (const auto& [b, t] : live) saved[t] += exec.buffer(b).bytes;
  return saved;
}

// By tensor name, the bytes layer 1 (of 2) saves for its backward pass.
std::map<std::string, std::int64_t> layer_saves(const ir::Graph& graph, const exec::ExecPlan& exec) {
  std::map<std::string, std::int64_t> saves;
  for (const auto& [t, bytes] : saved_at_the_turn(exec))
    if (graph.tensor(t).name.starts_with("layers.1.")) saves[graph.tensor(t).name] += bytes;
  return saves;
}

// Selective recompute on eager attention is Megatron-LM's (Korthikanti et al. 2022): a layer saves what it saves
// without recomputation less what its core attention writes (policy/attention_core.h), so of the attention only
// q (scaled), k and v, 3 x [b, heads / tp, s, d] (the context, the output projection's input, is rebuilt with the
// core, which runs again whole from q, k and v, as Megatron-LM's checkpoint reruns CoreAttention); no
// [b, heads, s, s] tensor stays saved, and the rest of the layer (norms, MLP) saves as without recomputation.
TEST(SelectiveRecompute, EagerAttentionSavesQKVAndNoScores) {
  constexpr std::int64_t kSeq = 256, kHidden = 768;
  for (const auto impl : {models::AttentionImpl::eager, models::AttentionImpl::eager_fp32_softmax}) {
    auto forward = models::build_model("gpt3-125m", {.batch = 1, .seq = kSeq, .dtype = ir::DType::f16, .layers = 2,
                                                     .vocab = 1024, .attention = impl});
    ASSERT_TRUE(forward) << forward.error().to_string();
    auto graph = ir::build_training_graph(*forward, ops::builtin_ops(), {});
    ASSERT_TRUE(graph) << graph.error().to_string();
    const std::vector<char> in_core = attention_core_ops(*graph, ops::builtin_ops());
    std::set<std::string> core_outputs;
    for (const ir::Op& op : graph->ops)
      if (in_core[op.id.index()])
        for (ir::TensorId t : op.outputs) core_outputs.insert(graph->tensor(t).name);
    for (const int tp : {1, 2}) {
      SCOPED_TRACE(fmt::format("{} tp {}", models::name(impl), tp));
      std::map<std::string, std::int64_t> saves[2];
      for (const Recompute r : {Recompute::none, Recompute::selective}) {
        const auto job = exec::testing::policy_plan(*graph, "megatron", ParallelConfig{.tp = tp, .recompute = r});
        ASSERT_EQ(job->stage, api::Stage::materialized);
        saves[r == Recompute::selective] = layer_saves(*graph, job->exec);
      }
      std::map<std::string, std::int64_t> expected;
      for (const auto& [name, bytes] : saves[0])
        if (!core_outputs.contains(name)) expected.emplace(name, bytes);
      EXPECT_EQ(saves[1], expected);
      std::int64_t attention = 0;
      for (const auto& [name, bytes] : saves[1])
        if (name.starts_with("layers.1.attn.") && name != "layers.1.attn.out") attention += bytes;
      EXPECT_EQ(attention, 3 * kSeq * kHidden / tp * ir::size_bytes(ir::DType::f16));
      for (const char* qkv : {"layers.1.attn.q_scaled", "layers.1.attn.k_heads", "layers.1.attn.v_heads"})
        EXPECT_TRUE(saves[1].contains(qkv)) << qkv;
      for (const auto& [t, bytes] : saved_at_the_turn(
               exec::testing::policy_plan(*graph, "megatron", ParallelConfig{.tp = tp, .recompute = Recompute::selective})
                   ->exec)) {
        const ir::Shape& shape = graph->tensor(t).shape;
        EXPECT_FALSE(shape.rank() >= 4 && shape[shape.rank() - 1] == kSeq && shape[shape.rank() - 2] == kSeq)
            << graph->tensor(t).name << " " << shape.to_string() << " stays saved";
      }
      // Without recomputation the scores' probabilities were saved: the test can see them.
      EXPECT_TRUE(saves[0].contains("layers.1.attn.probs"));
    }
  }
}

// The layers of a fused attention kernel keep Loom's memory-bound selective recomputation (no core to recompute).
TEST(SelectiveRecompute, FusedAttentionRecomputesTheMemoryBoundOps) {
  auto forward = models::build_model("gpt3-125m", {.batch = 1, .seq = 256, .dtype = ir::DType::f16, .layers = 2,
                                                   .vocab = 1024});
  ASSERT_TRUE(forward);
  auto graph = ir::build_training_graph(*forward, ops::builtin_ops(), {});
  ASSERT_TRUE(graph);
  auto made = plan::make_plan(*graph, ops::builtin_ops());
  ASSERT_TRUE(made);
  ASSERT_TRUE(apply_recompute(*made, Recompute::selective));
  std::set<std::string> recomputed;
  for (const plan::SubOp& s : made->sub_ops)
    if (s.live && plan::is_recomputed(*made, s.id) && layer_of(made->op_of(s.id).name) == "layers.1")
      recomputed.insert(made->op_of(s.id).name);
  EXPECT_TRUE(recomputed.contains("layers.1.ln1"));
  EXPECT_TRUE(recomputed.contains("layers.1.mlp.act"));
  EXPECT_FALSE(recomputed.contains("layers.1.attn.sdpa"));
  EXPECT_FALSE(recomputed.contains("layers.1.mlp.fc1"));
}

// memory-bound is selective's meaning before it became Megatron-LM's: on eager attention too, the layers'
// memory-bound ops (norms, activations, softmax, dropouts, reshapes) and no contraction, so the scores q k^T
// stay saved; on a fused kernel it recomputes what selective recomputes there.
std::set<std::string> recomputed_in_layer_1(models::AttentionImpl impl, Recompute recompute) {
  auto forward = models::build_model("gpt3-125m", {.batch = 1, .seq = 256, .dtype = ir::DType::f16, .layers = 2,
                                                   .vocab = 1024, .attention = impl});
  EXPECT_TRUE(forward);
  auto graph = ir::build_training_graph(*forward, ops::builtin_ops(), {});
  EXPECT_TRUE(graph);
  auto made = plan::make_plan(*graph, ops::builtin_ops());
  EXPECT_TRUE(made);
  EXPECT_TRUE(apply_recompute(*made, recompute));
  std::set<std::string> recomputed;
  for (const plan::SubOp& s : made->sub_ops)
    if (s.live && plan::is_recomputed(*made, s.id) && layer_of(made->op_of(s.id).name) == "layers.1")
      recomputed.insert(made->op_of(s.id).name);
  return recomputed;
}

TEST(MemoryBoundRecompute, RecomputesNoContractionOnEagerAttention) {
  for (const auto impl : {models::AttentionImpl::eager, models::AttentionImpl::eager_fp32_softmax}) {
    SCOPED_TRACE(models::name(impl));
    const std::set<std::string> recomputed = recomputed_in_layer_1(impl, Recompute::memory_bound);
    EXPECT_TRUE(recomputed.contains("layers.1.ln1"));
    EXPECT_TRUE(recomputed.contains("layers.1.mlp.act"));
    EXPECT_TRUE(recomputed.contains("layers.1.attn.probs"));
    EXPECT_FALSE(recomputed.contains("layers.1.attn.scores"));
    EXPECT_FALSE(recomputed.contains("layers.1.mlp.fc1"));
    // Selective (Megatron-LM's) recomputes the scores' contraction and none of the norms.
    const std::set<std::string> selective = recomputed_in_layer_1(impl, Recompute::selective);
    EXPECT_TRUE(selective.contains("layers.1.attn.scores"));
    EXPECT_FALSE(selective.contains("layers.1.ln1"));
  }
  EXPECT_EQ(recomputed_in_layer_1(models::AttentionImpl::fused, Recompute::memory_bound),
            recomputed_in_layer_1(models::AttentionImpl::fused, Recompute::selective));
}

TEST(MemoryBoundRecompute, ParsesAndNamesItsLevel) {
  const auto parsed = parse_recompute("memory-bound");
  ASSERT_TRUE(parsed);
  EXPECT_EQ(*parsed, Recompute::memory_bound);
  EXPECT_EQ(name(Recompute::memory_bound), "memory-bound");
  const auto bad = parse_recompute("memory_bound");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().to_string().find("memory-bound"), std::string::npos);
}

}  // namespace
}  // namespace loom::policy
