// Analytic check of Megatron tensor parallelism (Shoeybi et al. 2019, §3): each transformer layer issues
// exactly two all-reduces in the forward pass (after the attention output projection and after the
// second MLP linear, the row-parallel outputs) and two in the backward pass (the input gradients of the
// column-parallel QKV and first MLP linear, before the replicated layer norms). Weight gradients of
// replicated ops (layer norms, row-parallel biases) are computed whole on every rank and never reduced.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "testing/policy_plans.h"
#include "layer_all_reduces.h"

namespace loom::policy {
namespace {

using exec::testing::policy_plan;
using testing::all_reduces_per_layer;
using exec::testing::shrunk_training_graph;

// The layer ("layers.3") a tensor name belongs to, or "" outside the layers.
std::string layer_of(const std::string& tensor) {
  if (!tensor.starts_with("layers.")) return "";
  return tensor.substr(0, tensor.find('.', 7));
}

TEST(MegatronCollectives, TwoAllReducesPerLayerEachWay) {
  for (const char* preset : {"gpt3-125m", "llama3-8b"}) {
    const ir::Graph& graph = shrunk_training_graph(preset, ir::DType::f32);
    for (int tp : {2, 4}) {
      const auto pp = policy_plan(graph, "tp", {.tp = tp});
      const auto counts = all_reduces_per_layer(pp->exec, layer_of);
      int layers = 0;
      for (const auto& [layer, c] : counts) {
        if (layer.empty()) continue;
        ++layers;
        EXPECT_EQ(c.forward, 2) << preset << " tp " << tp << " " << layer;
        EXPECT_EQ(c.backward, 2) << preset << " tp " << tp << " " << layer;
      }
      EXPECT_GE(layers, 2) << preset;
    }
  }
}

// No parameter gradient is all-reduced across tensor-parallel ranks: every one is either split (its
// shard computed whole on its rank) or computed whole on every rank.
TEST(MegatronCollectives, NoWeightGradientAllReduceUnderPureTensorParallelism) {
  const ir::Graph& graph = shrunk_training_graph("gpt3-125m", ir::DType::f32);
  const auto pp = policy_plan(graph, "tp", {.tp = 2});
  for (const exec::CollectiveInfo& info : pp->exec.collectives) {
    if (!info.tensor.valid()) continue;
    const ir::FullTensor& t = graph.tensor(info.tensor);
    const bool weight_gradient = t.role == ir::TensorRole::gradient && t.owner.valid() &&
                                 graph.tensor(t.owner).role == ir::TensorRole::parameter;
    EXPECT_FALSE(weight_gradient) << t.name << " moved by " << info.rule;
  }
}

}  // namespace
}  // namespace loom::policy
