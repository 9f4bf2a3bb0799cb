// plan::batch_coupling: which ops tie a step's micro-batches together (UNet's fused batch norms read the
// whole batch; batch-norm parts sum over it and normalize every sample), and the megatron policy refusing
// exactly the micro-batchings the coupling forbids, so the search's space (SpaceFacts::micro_batching)
// can ask before it offers them.
#include <gtest/gtest.h>

#include <string>

#include "loom/ir/autograd.h"
#include "loom/ir/graph_builder.h"
#include "loom/models/zoo.h"
#include "loom/ops/registry.h"
#include "loom/plan/batch.h"
#include "loom/policy/policy.h"

namespace loom::policy {
namespace {

ir::Graph training(Expected<ir::Graph> forward) {
  EXPECT_TRUE(forward) << forward.error().to_string();
  if (!forward) return {};
  auto graph = ir::build_training_graph(*forward, ops::builtin_ops(), {.kind = ir::OptimizerKind::sgd, .lr = 0.1});
  EXPECT_TRUE(graph) << graph.error().to_string();
  return graph.value_or(ir::Graph{});
}

ir::Graph preset(const std::string& name) {
  return training(models::build_model(name, {.batch = 4, .dtype = ir::DType::f32, .shrink = true}));
}

// x [4, 3, 6, 6] -> conv -> batch norm as its parts (sums over the batch, then each sample normalized
// by them) -> relu -> mean over space -> linear -> loss.
ir::Graph batch_norm_parts_cnn() {
  ir::GraphBuilder b("bn_parts", ops::builtin_ops());
  const ir::TensorId x = b.input("x", ir::Shape{4, 3, 6, 6}, ir::DType::f32);
  const ir::TensorId labels = b.input("labels", ir::Shape{4}, ir::DType::i64);
  const ir::TensorId conv_w = b.parameter("conv.weight", ir::Shape{4, 3, 3, 3}, ir::DType::f32);
  const ir::TensorId bn_w = b.parameter("bn.weight", ir::Shape{4}, ir::DType::f32);
  const ir::TensorId bn_b = b.parameter("bn.bias", ir::Shape{4}, ir::DType::f32);
  const ir::TensorId fc_w = b.parameter("fc.weight", ir::Shape{5, 4}, ir::DType::f32);
  const ir::TensorId h = b.op("conv2d", "conv", {x, conv_w}, {{"padding", std::vector<std::int64_t>{1}}});
  const std::vector<ir::TensorId> sums = b.ops("batch_norm_sums", "bn.sums", {h});
  const ir::TensorId squares = b.op("batch_norm_centered_sums", "bn.squares", {h, sums[0], sums[1]});
  const ir::TensorId normed = b.op("batch_norm_from_sums", "bn", {h, sums[0], squares, sums[1], bn_w, bn_b});
  const ir::TensorId pooled = b.op("mean", "pool", {b.op("relu", "act", {normed})}, {{"dims", std::vector<std::int64_t>{2, 3}}});
  b.set_loss(b.op("cross_entropy", "loss", {b.op("linear", "fc", {pooled, fc_w}), labels}));
  return training(std::move(b).finish());
}

plan::BatchCoupling coupling_of(const ir::Graph& graph) {
  auto made = plan::make_plan(graph, ops::builtin_ops());
  EXPECT_TRUE(made) << made.error().to_string();
  return made ? plan::batch_coupling(*made) : plan::BatchCoupling{};
}

bool megatron_accepts(const ir::Graph& graph, const ParallelConfig& config) {
  auto made = plan::make_plan(graph, ops::builtin_ops());
  EXPECT_TRUE(made) << made.error().to_string();
  return made && apply_policy(*made, "megatron", config).has_value();
}

TEST(BatchCoupling, UNetsFusedBatchNormsReadTheWholeBatch) {
  const ir::Graph graph = preset("unet-33m");
  const plan::BatchCoupling c = coupling_of(graph);
  EXPECT_FALSE(c.independent());
  EXPECT_FALSE(c.batch_sum);
  ASSERT_FALSE(c.whole_batch_readers.empty());
  for (const plan::BatchCoupling::WholeBatchReader& r : c.whole_batch_readers) {
    EXPECT_EQ(graph.op(r.op).pass, ir::Pass::forward);
    EXPECT_EQ(graph.op(r.op).type, "batch_norm") << graph.op(r.op).name;
  }
}

TEST(BatchCoupling, BatchNormPartsSumOverTheBatchAndNormalizeEverySample) {
  const ir::Graph graph = batch_norm_parts_cnn();
  const plan::BatchCoupling c = coupling_of(graph);
  ASSERT_TRUE(c.batch_sum);
  EXPECT_EQ(graph.op(c.batch_sum->sum).name, "bn.sums");
  EXPECT_EQ(graph.op(c.batch_sum->reader).name, "bn.squares");
  EXPECT_TRUE(c.whole_batch_readers.empty());
}

TEST(BatchCoupling, TransformersAreIndependentThoughTheLossSumsOverTheBatch) {
  for (const std::string name : {"gpt3-125m", "t5-3.9b"}) EXPECT_TRUE(coupling_of(preset(name)).independent()) << name;
}

// The policy refuses gradient accumulation exactly where the coupling is not independent, and a GPipe
// pipeline exactly where a batch sum is read per sample.
TEST(BatchCoupling, TheMegatronPolicyRefusesWhatTheCouplingForbids) {
  for (const auto& [name, graph] : {std::pair{"unet-33m", preset("unet-33m")},
                                    std::pair{"bn-parts-cnn", batch_norm_parts_cnn()},
                                    std::pair{"gpt3-125m", preset("gpt3-125m")}}) {
    SCOPED_TRACE(name);
    const plan::BatchCoupling c = coupling_of(graph);
    EXPECT_TRUE(megatron_accepts(graph, {.dp = 2}));
    EXPECT_EQ(megatron_accepts(graph, {.micro_batches = 2}), c.independent());
    EXPECT_EQ(megatron_accepts(graph, {.pp = 2, .micro_batches = 2, .schedule = plan::ScheduleKind::gpipe}),
              !c.batch_sum);
  }
}

}  // namespace
}  // namespace loom::policy
