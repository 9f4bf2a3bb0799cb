// Sequence parallelism (Korthikanti et al. 2022) over Megatron's tensor parallelism: the layout (which
// ops split along the sequence), the collectives materialization derives from it (no all-reduce of an
// activation or of its gradient inside the layers: a reduce-scatter and an all-gather per tensor-parallel
// region each way instead), exact training, and the errors.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

#include "testing/policy_plans.h"
#include "loom/policy/tensor_parallel.h"
#include "policy_test_support.h"

namespace loom::policy {
namespace {

using exec::testing::policy_plan;
using exec::testing::shrunk_training_graph;

std::string layer_of_tensor(const std::string& tensor) {
  if (!tensor.starts_with("layers.")) return "";
  return tensor.substr(0, tensor.find('.', 7));
}

// Collectives by (layer, activation or gradient, kind) of the activations and activation gradients
// (weight gradients left out: sequence-split norms reduce theirs, as in Megatron).
using Counts = std::map<std::string, int>;  // "forward all-gather" -> count
std::map<std::string, Counts> activation_collectives(const exec::ExecPlan& exec) {
  const ir::Graph& graph = *exec.plan->graph;
  std::map<std::string, Counts> result;
  std::set<std::int64_t> seen;
  for (const exec::CollectiveInfo& info : exec.collectives) {
    if (!info.tensor.valid()) continue;
    const ir::FullTensor& t = graph.tensor(info.tensor);
    const bool weight_gradient = t.role == ir::TensorRole::gradient && t.owner.valid() &&
                                 graph.tensor(t.owner).role == ir::TensorRole::parameter;
    if (weight_gradient || t.role == ir::TensorRole::parameter) continue;
    std::string kind = "other";
    for (const char* k : {"all-reduce", "all-gather", "reduce-scatter", "all-to-all"})
      if (info.rule.find(k) != std::string::npos) kind = k;
    const std::string pass = t.role == ir::TensorRole::gradient ? "backward " : "forward ";
    ++result[layer_of_tensor(t.name)][pass + kind];
  }
  return result;
}

TEST(SequenceParallelLayout, SplitsTheOpsTensorParallelismReplicatesAlongTheSequence) {
  const ir::Graph& graph = testing::shrunk("gpt3-125m").graph;
  auto fresh = plan::make_plan(graph, ops::builtin_ops());
  ASSERT_TRUE(fresh);
  auto layout = tensor_parallel_layout(*fresh, 2, true);
  ASSERT_TRUE(layout) << layout.error().to_string();
  auto plain = tensor_parallel_layout(*fresh, 2, false);
  ASSERT_TRUE(plain) << plain.error().to_string();
  std::set<std::string> sequence_split;
  for (const ir::Op& op : graph.ops) {
    const std::size_t i = op.id.index();
    if (!layout->sequence_split[i]) {
      // Everything else keeps the tensor-parallel layout.
      EXPECT_EQ(layout->splits[i].has_value(), plain->splits[i].has_value()) << op.name;
      continue;
    }
    EXPECT_FALSE(plain->splits[i]) << op.name << " is tensor-parallel already";
    sequence_split.insert(op.name);
  }
  for (const char* name : {"embed", "embed_dropout", "layers.0.ln1", "layers.0.attn.dropout", "layers.0.attn_residual",
                           "layers.1.ln2", "layers.1.mlp.dropout", "layers.1.mlp_residual", "ln_f", "loss"})
    EXPECT_TRUE(sequence_split.contains(name)) << name;
  // Position tables see no batch; the tensor-parallel regions keep their splits.
  for (const char* name : {"wpe", "wte", "layers.0.attn.qkv", "layers.0.attn.sdpa", "layers.0.mlp.fc2", "lm_head"})
    EXPECT_FALSE(sequence_split.contains(name)) << name;
}

// Megatron's sequence parallelism per layer: the row-parallel outputs (attention output projection, fc2)
// are reduce-scattered into sequence parts, the layer norms' outputs all-gathered before the
// column-parallel QKV and fc1, and the backward pairs each with the opposite collective.
TEST(SequenceParallelCollectives, ReduceScatterAndAllGatherReplaceTheAllReducesInEveryLayer) {
  for (const char* preset : {"gpt3-125m", "llama3-8b"}) {
    const ir::Graph& graph = shrunk_training_graph(preset, ir::DType::f32);
    const auto planned = policy_plan(graph, "tp", {.tp = 2, .sequence_parallel = true});
    const auto counts = activation_collectives(planned->exec);
    int layers = 0;
    for (const auto& [layer, c] : counts) {
      SCOPED_TRACE(std::string(preset) + " " + layer);
      // Outside the layers one all-reduce of per-token scalars remains: the loss's shift, which every
      // vocabulary part of the head reads whole (vocab_parallel_head_test.cc).
      const auto count = [&](const char* key) { return c.contains(key) ? c.at(key) : 0; };
      EXPECT_EQ(count("forward all-reduce") + count("backward all-reduce"), layer.empty() ? 1 : 0);
      if (layer.empty()) continue;  // embeddings and head: a reduce-scatter of the embedding, its gradient's all-gather
      ++layers;
      EXPECT_EQ(c.count("forward other") + c.count("backward other") + c.count("forward all-to-all"), 0u);
      EXPECT_EQ(c.at("forward reduce-scatter"), 2);
      EXPECT_EQ(c.at("forward all-gather"), 2);
      EXPECT_EQ(c.at("backward reduce-scatter"), 2);
      EXPECT_EQ(c.at("backward all-gather"), 2);
    }
    EXPECT_GE(layers, 2) << preset;
  }
}

TEST(SequenceParallelRun, TrainsExactly) {
  for (const char* preset : {"gpt3-125m", "llama3-8b"}) {
    testing::expect_trains_exactly(preset, "tp", {.tp = 2, .sequence_parallel = true});
    testing::expect_trains_exactly(preset, "dp-tp", {.dp = 2, .tp = 2, .sequence_parallel = true});
  }
  testing::expect_trains_exactly("gpt3-125m", "megatron",
                                 {.dp = 2, .tp = 2, .pp = 2, .micro_batches = 2, .sequence_parallel = true});
}

TEST(SequenceParallelErrors, NeedsTensorParallelismAndASequence) {
  const testing::Model& gpt = testing::shrunk("gpt3-125m");
  auto plan = plan::make_plan(gpt.graph, ops::builtin_ops());
  ASSERT_TRUE(plan);
  auto without_tp = apply_policy(*plan, "megatron", {.dp = 2, .sequence_parallel = true});
  ASSERT_FALSE(without_tp);
  EXPECT_NE(without_tp.error().message.find("sequence parallelism needs tensor parallelism"), std::string::npos)
      << without_tp.error().to_string();
  auto plan2 = plan::make_plan(gpt.graph, ops::builtin_ops());
  auto dp_policy = apply_policy(*plan2, "dp", {.dp = 2, .sequence_parallel = true});
  ASSERT_FALSE(dp_policy);
  EXPECT_NE(dp_policy.error().message.find("does not use tensor parallelism"), std::string::npos)
      << dp_policy.error().to_string();
  // Swin reads images: no token sequence to split.
  const testing::Model& swin = testing::shrunk("swin-1.8b");
  auto plan3 = plan::make_plan(swin.graph, ops::builtin_ops());
  ASSERT_TRUE(plan3);
  auto images = apply_policy(*plan3, "tp", {.tp = 2, .sequence_parallel = true});
  ASSERT_FALSE(images);
  EXPECT_NE(images.error().message.find("carries a sequence"), std::string::npos) << images.error().to_string();
}

}  // namespace
}  // namespace loom::policy
