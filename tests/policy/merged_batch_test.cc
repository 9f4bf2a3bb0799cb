// Data parallelism over an op whose batch is a later atom of a merged dimension (ProphetNet's loss reads
// logits transposed to [ngram, batch, seq, vocab] and viewed as [(ngram batch seq), vocab]): a shard of
// (s b) along b is not one strided range, so that op and the ops after it see the whole batch and run
// replicated, and the plan still trains exactly as one device.
#include <gtest/gtest.h>

#include "loom/ir/autograd.h"
#include "loom/ir/graph_builder.h"
#include "loom/ops/registry.h"
#include "loom/plan/batch.h"
#include "loom/policy/policy.h"
#include "policy_test_support.h"

namespace loom::policy {
namespace {

ir::Graph transposed_loss_graph() {
  ir::GraphBuilder b("transposed_loss", ops::builtin_ops());
  const ir::TensorId x = b.input("x", ir::Shape{4, 3, 8}, ir::DType::f32);
  const ir::TensorId w = b.parameter("w", ir::Shape{6, 8}, ir::DType::f32);
  const ir::TensorId logits = b.op("linear", "fc", {x, w});
  const ir::TensorId seq_first = b.op("transpose", "seq_first", {logits}, {{"dim0", std::int64_t{0}}, {"dim1", std::int64_t{1}}});
  const ir::TensorId rows = b.op("view", "rows", {seq_first}, {{"shape", std::vector<std::int64_t>{12, 6}}});
  const ir::TensorId log_probs = b.op("log_softmax", "log_probs", {rows}, {{"dim", std::int64_t{-1}}});
  b.set_loss(b.op("mean", "loss", {log_probs}));
  auto forward = std::move(b).finish();
  EXPECT_TRUE(forward) << forward.error().to_string();
  auto training = ir::build_training_graph(*forward, ops::builtin_ops(), {.kind = ir::OptimizerKind::sgd, .lr = 0.1});
  EXPECT_TRUE(training) << training.error().to_string();
  return std::move(*training);
}

const ir::Op& op_named(const ir::Graph& graph, std::string_view name) {
  for (const ir::Op& op : graph.ops)
    if (op.name == name) return op;
  throw std::runtime_error("no op " + std::string(name));
}

TEST(MergedBatch, TheOpsAfterTheMergeSeeTheWholeBatch) {
  const ir::Graph graph = transposed_loss_graph();
  auto made = plan::make_plan(graph, ops::builtin_ops());
  ASSERT_TRUE(made) << made.error().to_string();
  const auto batch = plan::batch_identifiers(*made);
  EXPECT_TRUE(batch[op_named(graph, "fc").id.index()].has_value());
  EXPECT_TRUE(batch[op_named(graph, "seq_first").id.index()].has_value());
  EXPECT_FALSE(batch[op_named(graph, "rows").id.index()].has_value());
  EXPECT_FALSE(batch[op_named(graph, "log_probs").id.index()].has_value());
}

TEST(MergedBatch, DataParallelReplicatesThemAndTrainsAsOneDevice) {
  const ir::Graph graph = transposed_loss_graph();
  auto made = plan::make_plan(graph, ops::builtin_ops());
  ASSERT_TRUE(made) << made.error().to_string();
  auto applied = apply_policy(*made, "dp", {.dp = 2});
  ASSERT_TRUE(applied) << applied.error().to_string();
  // fc is split along the batch (half the rows each); the view runs whole on both devices.
  for (plan::SubOpId part : made->parts[op_named(graph, "fc").id.index()])
    EXPECT_EQ(made->sub_op(part).inputs[0].box[0].size(), 2);
  for (plan::SubOpId part : made->parts[op_named(graph, "rows").id.index()])
    EXPECT_EQ(made->sub_op(part).outputs[0].box[0].size(), 12);
  testing::expect_plan_trains_as_one_device(*made, 2, 5);
}

}  // namespace
}  // namespace loom::policy
