// Megatron tensor parallelism of a traced HuggingFace GPT-2 (python/loom traced GPT2LMHeadModel with
// n_layer 2, n_embd 64, n_head 4, vocab 128 on a [4, 16] batch; the fixture is that graph as
// `loom graph --from traced.json --forward-only --json` writes it, annotations resolved). HF's Conv1D
// is traced as matmul + add with a parameter [in, out]: the tensor-parallel analysis takes it for a
// linear with a transposed weight, so each layer gets Megatron's two all-reduces in the forward pass
// (after attn.c_proj and mlp.c_proj, the row-parallel outputs) and two in the backward pass (the input
// gradients of the column-parallel attention and mlp.c_fc).
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "testing/policy_plans.h"
#include "layer_all_reduces.h"
#include "loom/policy/tensor_parallel.h"
#include "policy_test_support.h"

namespace loom::policy {
namespace {

using exec::testing::policy_plan;
using testing::all_reduces_per_layer;
using testing::traced_gpt2_training_graph;


// "transformer.h.1" for the tensors of layer 1 (gradients are named after their tensor), else "".
std::string layer_of(const std::string& tensor) {
  const std::size_t at = tensor.find("transformer.h.");
  if (at == std::string::npos) return "";
  return tensor.substr(at, tensor.find('.', at + 14) - at);
}

TEST(TracedGpt2, MegatronTensorParallelismGivesTwoAllReducesPerLayerEachWay) {
  const ir::Graph& graph = traced_gpt2_training_graph();
  for (int tp : {2, 4}) {
    const auto pp = policy_plan(graph, "tp", {.tp = tp});
    const auto counts = all_reduces_per_layer(pp->exec, layer_of);
    int layers = 0;
    for (const auto& [layer, c] : counts) {
      if (layer.empty()) continue;
      ++layers;
      EXPECT_EQ(c.forward, 2) << "tp " << tp << " " << layer;
      EXPECT_EQ(c.backward, 2) << "tp " << tp << " " << layer;
    }
    EXPECT_EQ(layers, 2) << "tp " << tp;
  }
}

// The Conv1D weights [in, out] are split as Megatron splits them: column-parallel ones along 'out'
// (dim 1), row-parallel ones along 'in' (dim 0); the fused QKV, traced as [in, 3, out] (per part:
// python/loom/fused_projection.py), along 'out' (dim 2), so each rank holds whole heads of q, k and v;
// norms stay whole.
TEST(TracedGpt2, Conv1DWeightsSplitColumnThenRow) {
  const ir::Graph& graph = traced_gpt2_training_graph();
  auto made = plan::make_plan(graph, ops::builtin_ops());
  ASSERT_TRUE(made) << made.error().to_string();
  auto layout = tensor_parallel_layout(*made, 2);
  ASSERT_TRUE(layout) << layout.error().to_string();
  std::map<std::string, int> dims;
  for (const ir::FullTensor& t : graph.tensors)
    if (t.role == ir::TensorRole::parameter) dims[t.name] = layout->tensor_dims[t.id.index()];
  for (const char* layer : {"transformer.h.0", "transformer.h.1"}) {
    const std::string l = layer;
    EXPECT_EQ(dims.at(l + ".attn.c_attn.weight"), 2) << l;
    EXPECT_EQ(dims.at(l + ".attn.c_attn.bias"), 1) << l;
    EXPECT_EQ(dims.at(l + ".mlp.c_fc.weight"), 1) << l;
    EXPECT_EQ(dims.at(l + ".mlp.c_fc.bias"), 0) << l;
    EXPECT_EQ(dims.at(l + ".mlp.c_proj.weight"), 0) << l;
    EXPECT_EQ(dims.at(l + ".attn.c_proj.weight"), 0) << l;
    EXPECT_EQ(dims.at(l + ".ln_1.weight"), -1) << l;
  }
}

// Sequence parallelism over HuggingFace's Conv1D views, which merge (batch seq) into rows: the views cannot
// split the sequence (not the first identifier of the merged rows), so they and the projections keep it
// whole (all-gathered before them) while the layer norms, dropouts and residual adds split it; the plan
// trains exactly as one device.
TEST(TracedGpt2, SequenceParallelismLeavesTheConv1DViewsWhole) {
  const ir::Graph& graph = traced_gpt2_training_graph();
  auto made = plan::make_plan(graph, ops::builtin_ops());
  ASSERT_TRUE(made) << made.error().to_string();
  auto layout = tensor_parallel_layout(*made, 2, /*sequence_parallel=*/true);
  ASSERT_TRUE(layout) << layout.error().to_string();
  int norms = 0, views = 0;
  for (const ir::Op& op : graph.ops) {
    if (op.pass != ir::Pass::forward || op.name.find("transformer.h.0.") != 0) continue;
    if (op.type == "layer_norm") {
      ++norms;
      EXPECT_TRUE(layout->sequence_split[op.id.index()]) << op.name;
    }
    if (op.type == "view" && op.name.find(".c_attn.") != std::string::npos) {
      ++views;
      EXPECT_FALSE(layout->sequence_split[op.id.index()]) << op.name;
    }
  }
  EXPECT_EQ(norms, 2);
  EXPECT_GT(views, 0);

  ASSERT_TRUE(apply_policy(*made, "tp", {.tp = 2, .sequence_parallel = true}));
  testing::expect_plan_trains_as_one_device(*made, 2);
}

}  // namespace
}  // namespace loom::policy
