#include "loom/ir/graph_stats.h"

#include <gtest/gtest.h>

#include "loom/ir/autograd.h"
#include "loom/ir/graph_builder.h"
#include "loom/ops/registry.h"

namespace loom::ir {
namespace {

// x[4, 8] -> linear(w[16, 8]) -> cross_entropy(labels[4]) -> loss, bf16 weights, AdamW with fp32 masters.
Graph tiny_training_graph() {
  GraphBuilder b("tiny", ops::builtin_ops());
  TensorId x = b.input("x", Shape{4, 8}, DType::bf16);
  TensorId labels = b.input("labels", Shape{4}, DType::i64);
  TensorId w = b.parameter("w", Shape{16, 8}, DType::bf16);
  TensorId logits = b.op("linear", "proj", {x, w});
  b.set_loss(b.op("cross_entropy", "loss", {logits, labels}));
  auto forward = std::move(b).finish();
  EXPECT_TRUE(forward) << forward.error().to_string();
  auto training = build_training_graph(*forward, ops::builtin_ops(), {});
  EXPECT_TRUE(training) << training.error().to_string();
  return *training;
}

TEST(ComputeStats, CountsOpsFlopsAndBytesPerRole) {
  const Graph graph = tiny_training_graph();
  auto stats = compute_stats(graph, ops::builtin_ops());
  ASSERT_TRUE(stats) << stats.error().to_string();
  EXPECT_EQ(stats->ops[0], 2u);  // linear, cross_entropy
  EXPECT_EQ(stats->ops[1], 3u);  // loss seed, cross_entropy backward, linear backward
  EXPECT_EQ(stats->ops[2], 1u);  // adamw on w
  EXPECT_EQ(stats->parameter_count, 128);
  EXPECT_EQ(stats->parameter_bytes, 128 * 2);
  EXPECT_EQ(stats->gradient_bytes, 128 * 2);
  EXPECT_EQ(stats->optimizer_state_bytes, 128 * 12);  // fp32 master, exp_avg, exp_avg_sq
  EXPECT_EQ(stats->parameter_bytes + stats->gradient_bytes + stats->optimizer_state_bytes, 16 * 128);
  EXPECT_EQ(stats->input_bytes, 4 * 8 * 2 + 4 * 8);
  EXPECT_EQ(stats->activation_bytes, 4 * 16 * 2 + 4);  // bf16 logits, f32 scalar loss
}

TEST(OpFlops, BackwardOpsCostTheirFactorTimesTheForward) {
  const Graph graph = tiny_training_graph();
  auto flops = op_flops(graph, ops::builtin_ops());
  ASSERT_TRUE(flops);
  const Op* linear = nullptr;
  const Op* linear_backward = nullptr;
  for (const Op& op : graph.ops) {
    if (op.type != "linear") continue;
    (op.is_mirror() ? linear_backward : linear) = &op;
  }
  ASSERT_NE(linear, nullptr);
  ASSERT_NE(linear_backward, nullptr);
  EXPECT_DOUBLE_EQ((*flops)[linear->id.index()], 2.0 * 4 * 8 * 16);
  EXPECT_DOUBLE_EQ((*flops)[linear_backward->id.index()], 2.0 * 2.0 * 4 * 8 * 16);
  auto stats = compute_stats(graph, ops::builtin_ops());
  double total = 0;
  for (double f : *flops) total += f;
  EXPECT_DOUBLE_EQ(stats->total_flops(), total);
}

TEST(ComputeStats, UnknownOpTypeIsAnError) {
  Graph graph = tiny_training_graph();
  graph.ops[0].type = "no_such_op";
  auto stats = compute_stats(graph, ops::builtin_ops());
  ASSERT_FALSE(stats);
  EXPECT_NE(stats.error().message.find("unknown type 'no_such_op'"), std::string::npos);
}

}  // namespace
}  // namespace loom::ir
