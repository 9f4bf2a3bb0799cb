// Eager attention (models::AttentionImpl) computes what the fused scaled_dot_product_attention computes:
// the same shrunk model built both ways, from the same initial values (drawn by tensor name), gives the
// same loss and the same gradient of every parameter in the float64 interpreter. Models whose attention has
// no dropout: the fused reference kernel runs attention dropout as 0 (src/verify/kernels_attention.cc),
// the eager form as the dropout op it is.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>

#include "loom/ir/autograd.h"
#include "loom/models/zoo.h"
#include "loom/ops/registry.h"
#include "loom/verify/graph_interpreter.h"

namespace loom {
namespace {

struct TrainingRun {
  ir::Graph graph;
  std::vector<verify::NdArray> values;
};

TrainingRun run(std::string_view preset, models::AttentionImpl impl) {
  auto forward = models::build_model(preset, {.dtype = ir::DType::f64, .shrink = true, .attention = impl});
  EXPECT_TRUE(forward) << forward.error().to_string();
  auto graph = forward ? ir::build_training_graph(*forward, ops::builtin_ops(), {.kind = ir::OptimizerKind::sgd})
                       : Expected<ir::Graph>(ir::Graph{});
  EXPECT_TRUE(graph) << graph.error().to_string();
  TrainingRun r{.graph = graph.value_or(ir::Graph{}), .values = {}};
  auto values = verify::run_graph(r.graph, verify::initial_values(r.graph, 3));
  EXPECT_TRUE(values) << values.error().to_string();
  r.values = values.value_or(std::vector<verify::NdArray>{});
  return r;
}

// The loss and each parameter's gradient, by name.
std::map<std::string, const verify::NdArray*> loss_and_gradients(const TrainingRun& r) {
  std::map<std::string, const verify::NdArray*> found;
  if (r.values.empty()) return found;
  found["loss"] = &r.values[r.graph.loss.index()];
  for (const ir::FullTensor& t : r.graph.tensors)
    if (t.role == ir::TensorRole::gradient && t.owner.valid() &&
        r.graph.tensor(t.owner).role == ir::TensorRole::parameter && t.name == r.graph.tensor(t.owner).name + ".grad")
      found[t.name] = &r.values[t.id.index()];
  return found;
}

// Every named value of `want` in `got`, the same shape, within 1e-12 of the reference's scale.
void expect_same_values(const std::map<std::string, const verify::NdArray*>& want,
                        const std::map<std::string, const verify::NdArray*>& got) {
  ASSERT_GT(want.size(), 2u);
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [name, expected] : want) {
    ASSERT_TRUE(got.contains(name)) << name;
    const verify::NdArray& actual = *got.at(name);
    ASSERT_EQ(actual.shape, expected->shape) << name;
    double worst = 0, scale = 0;
    for (std::size_t i = 0; i < actual.data.size(); ++i) {
      worst = std::max(worst, std::abs(actual.data[i] - expected->data[i]));
      scale = std::max(scale, std::abs(expected->data[i]));
    }
    EXPECT_LE(worst, 1e-12 * std::max(scale, 1.0)) << name;
  }
}

TEST(EagerAttention, ComputesTheFusedOpsLossAndGradients) {
  // LLaMA: causal, grouped-query, rotary. Swin: window attention with a relative-position bias. GShard MoE:
  // causal, fused qkv.
  for (const char* preset : {"llama3-8b", "swin-1.8b", "moe-380m"}) {
    SCOPED_TRACE(preset);
    const TrainingRun fused = run(preset, models::AttentionImpl::fused), eager = run(preset, models::AttentionImpl::eager);
    const auto want = loss_and_gradients(fused), got = loss_and_gradients(eager);
    expect_same_values(want, got);
  }
}

// The eager-fp32 form (Megatron-LM's fp32 softmax with query-key layer scaling) computes the eager form's loss
// and gradients: the layer number divides q's scale and multiplies the scores back (built in f64, the form has
// no casts: what they hold is tested in tests/models). GPT: causal, with attention dropout.
TEST(EagerAttention, Fp32SoftmaxComputesTheEagerFormsLossAndGradients) {
  const TrainingRun eager = run("gpt3-125m", models::AttentionImpl::eager);
  const TrainingRun fp32 = run("gpt3-125m", models::AttentionImpl::eager_fp32_softmax);
  const auto want = loss_and_gradients(eager), got = loss_and_gradients(fp32);
  expect_same_values(want, got);
}

}  // namespace
}  // namespace loom
