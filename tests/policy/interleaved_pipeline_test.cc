// Interleaved pipelines (Megatron-LM's virtual pipeline, Narayanan et al. 2021): stages of whole layers,
// chunk c of pipeline rank s holding stage c * pp + s, and the interleaved 1F1B schedule. The plans are
// materialized, checked and run by the ExecPlan interpreter against one device.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>

#include "policy_test_support.h"
#include "testing/policy_plans.h"
#include "loom/ir/graph_builder.h"
#include "loom/policy/stages.h"
#include "loom/verify/exec_interpreter.h"
#include "loom/verify/graph_interpreter.h"
#include "loom/verify/plan_interpreter.h"

namespace loom::policy {
namespace {

using testing::deep;

// The materialized plan runs on simulated devices as one device runs the graph (rel 1e-9).
void expect_exec_trains_exactly(const ir::Graph& graph, std::string_view policy, const ParallelConfig& config) {
  const auto planned = exec::testing::policy_plan(graph, policy, config);
  ASSERT_FALSE(planned->exec.programs.empty());
  const auto initial = verify::initial_values(graph, 7);
  auto reference = verify::run_graph(graph, initial);
  ASSERT_TRUE(reference) << reference.error().to_string();
  auto run = verify::run_exec_plan(planned->exec, initial);
  ASSERT_TRUE(run) << run.error().to_string();
  auto c = verify::compare_runs(graph, *reference, run->values);
  ASSERT_TRUE(c) << c.error().to_string();
  EXPECT_LT(c->overall.max_rel, 1e-9) << c->overall.worst;
}

TEST(LayerStages, LayerOfAnOpName) {
  EXPECT_EQ(layer_of("layers.3.attn.qkv"), "layers.3");
  EXPECT_EQ(layer_of("encoder.layers.12.mlp.fc1"), "encoder.layers.12");
  EXPECT_EQ(layer_of("layers.1.blocks.0.mlp.fc1"), "layers.1.blocks.0");
  EXPECT_EQ(layer_of("layers.0.attn.qkv.split"), "layers.0");
  EXPECT_EQ(layer_of("wte"), "");
  EXPECT_EQ(layer_of("iteration0"), "");
  EXPECT_EQ(layer_of("7"), "7");
  EXPECT_EQ(layer_of(""), "");
}

// Four layers into four stages: the embeddings open stage 0, layer i is stage i, and the final norm,
// head and loss close stage 3.
TEST(LayerStages, WholeLayersPerStage) {
  const ir::Graph& graph = deep("gpt3-125m", 4);
  auto plan = plan::make_plan(graph, ops::builtin_ops());
  ASSERT_TRUE(plan);
  auto stages = layer_stages(*plan, 4);
  ASSERT_TRUE(stages) << stages.error().to_string();
  for (const ir::Op& op : graph.ops) {
    const int s = (*stages)[op.id.index()];
    if (op.pass != ir::Pass::forward) {
      EXPECT_EQ(s, -1) << op.name;
      continue;
    }
    const std::string_view layer = layer_of(op.name);
    const int expected = layer.empty() ? (op.name.starts_with("w") || op.name.starts_with("embed") ? 0 : 3)
                                       : layer.back() - '0';
    EXPECT_EQ(s, expected) << op.name;
  }
  auto two = layer_stages(*plan, 2);
  ASSERT_TRUE(two);
  EXPECT_EQ((*two)[graph.ops.front().id.index()], 0);
}

TEST(LayerStages, Errors) {
  auto plan = plan::make_plan(deep("gpt3-125m", 4), ops::builtin_ops());
  ASSERT_TRUE(plan);
  auto three = layer_stages(*plan, 3);
  ASSERT_FALSE(three);
  EXPECT_NE(three.error().message.find("4 layers of 'gpt3-125m' are not divisible into 3 stages"), std::string::npos)
      << three.error().message;
  // A model without numbered layers.
  ir::GraphBuilder b("flat", ops::builtin_ops());
  const ir::TensorId x = b.input("x", ir::Shape{4, 8}, ir::DType::f32);
  const ir::TensorId w = b.parameter("w", ir::Shape{8, 8}, ir::DType::f32);
  b.set_loss(b.op("mean", "loss", {b.op("linear", "fc", {x, w})}));
  auto forward = std::move(b).finish();
  ASSERT_TRUE(forward) << forward.error().to_string();
  auto flat = plan::make_plan(*forward, ops::builtin_ops());
  ASSERT_TRUE(flat);
  auto none = layer_stages(*flat, 2);
  ASSERT_FALSE(none);
  EXPECT_NE(none.error().message.find("no numbered layers"), std::string::npos) << none.error().message;
}

// Layer k on stage k of pp x v = 4: pipeline rank k mod 2, so device 0 holds layers 0 and 2 and device 1
// layers 1 and 3, the head and the loss.
TEST(InterleavedPolicy, ChunksOfWholeLayersAlternateOverTheRanks) {
  const ir::Graph& graph = deep("gpt3-125m", 4);
  auto plan = plan::make_plan(graph, ops::builtin_ops());
  ASSERT_TRUE(plan);
  ASSERT_TRUE(apply_policy(*plan, "pp", {.pp = 2, .micro_batches = 4, .virtual_stages = 2}));
  for (const ir::Op& op : graph.ops) {
    if (op.pass != ir::Pass::forward) continue;
    const std::string_view layer = layer_of(op.name);
    const int expected = layer.empty() ? (op.name == "lm_head" || op.name.starts_with("loss") || op.name == "ln_f" ? 1 : 0)
                                       : (layer.back() - '0') % 2;
    for (plan::SubOpId part : plan->parts[op.id.index()]) EXPECT_EQ(plan->sub_op(part).device, expected) << op.name;
  }
}

TEST(InterleavedPolicy, TrainsExactly) {
  expect_exec_trains_exactly(deep("gpt3-125m", 4), "pp", {.pp = 2, .micro_batches = 4, .virtual_stages = 2});
  expect_exec_trains_exactly(deep("llama3-8b", 4), "pp", {.pp = 2, .micro_batches = 2, .virtual_stages = 2});
  expect_exec_trains_exactly(deep("gpt3-125m", 6), "pp", {.pp = 2, .micro_batches = 4, .virtual_stages = 3});
  expect_exec_trains_exactly(deep("gpt3-125m", 4), "megatron",
                             {.dp = 2, .tp = 2, .pp = 2, .micro_batches = 2, .virtual_stages = 2,
                              .sequence_parallel = true});
}

TEST(InterleavedPolicy, Errors) {
  const ir::Graph& graph = deep("gpt3-125m", 4);
  const auto refused = [&](std::string_view policy, const ParallelConfig& config, std::string_view text) {
    auto plan = plan::make_plan(graph, ops::builtin_ops());
    ASSERT_TRUE(plan);
    auto applied = apply_policy(*plan, policy, config);
    ASSERT_FALSE(applied) << text;
    EXPECT_NE(applied.error().message.find(text), std::string::npos) << applied.error().to_string();
  };
  refused("pp", {.pp = 2, .micro_batches = 3, .virtual_stages = 2}, "3 micro-batches are not a multiple of pp 2");
  refused("pp", {.pp = 2, .micro_batches = 4, .virtual_stages = 3}, "4 layers of 'gpt3-125m' are not divisible into 6");
  refused("pp", {.pp = 2, .micro_batches = 4, .schedule = plan::ScheduleKind::gpipe, .virtual_stages = 2},
          "not GPipe");
  refused("pp", {.pp = 1, .micro_batches = 4, .virtual_stages = 2}, "need a pipeline, but pp is 1");
  refused("dp", {.dp = 2, .virtual_stages = 2}, "does not use virtual_stages");
  refused("pp", {.pp = 2, .micro_batches = 4, .virtual_stages = 0}, "virtual_stages is 0");
}

}  // namespace
}  // namespace loom::policy
