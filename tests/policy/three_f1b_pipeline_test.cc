// 3F1B on AlphaFold2 (policy/passes.h, plan/schedule_3f1b.h): the passes counted from the shared
// weights, each pass staged by layer so that pass p's layer l runs on layer l's device, the plan run by
// the ExecPlan interpreter against one device, and the models 3F1B refuses.
#include <gtest/gtest.h>

#include <string>

#include "policy_test_support.h"
#include "loom/ir/graph_builder.h"
#include "loom/policy/passes.h"
#include "loom/policy/stages.h"

namespace loom::policy {
namespace {

using testing::deep;

TEST(LayerPasses, CountsTheLayersSharingTheFirstWeights) {
  EXPECT_EQ(layer_passes(deep("alphafold2-87m", 2, true)), 2);   // 1 recycle + 1
  EXPECT_EQ(layer_passes(deep("alphafold2-87m", 1, false)), 4);  // 3 recycles + 1
  EXPECT_EQ(layer_passes(deep("gpt3-125m", 2, true)), 1);
}

// pp 2, 2 Evoformer blocks, 2 passes: stage p * 2 + s holds block s of pass p, so block s of every
// pass (and its shared weights) is on device s; the distogram head and loss close the last stage.
TEST(ThreeFOneBPolicy, EachPassStagedByLayerOnTheSameDevices) {
  const ir::Graph& graph = deep("alphafold2-87m", 2, true);
  auto plan = plan::make_plan(graph, ops::builtin_ops());
  ASSERT_TRUE(plan);
  const ParallelConfig config{.pp = 2, .micro_batches = 4, .schedule = plan::ScheduleKind::three_f_one_b};
  auto applied = apply_policy(*plan, "megatron", config);
  ASSERT_TRUE(applied) << applied.error().to_string();
  int checked = 0;
  for (const ir::Op& op : graph.ops) {
    if (op.pass != ir::Pass::forward) continue;
    const std::string_view layer = layer_of(op.name);
    if (layer.empty()) continue;
    const int expected = layer.back() - '0';  // "iteration<p>.evoformer.<l>"
    for (plan::SubOpId part : plan->parts[op.id.index()]) EXPECT_EQ(plan->sub_op(part).device, expected) << op.name;
    ++checked;
  }
  EXPECT_GT(checked, 100);
  for (const ir::Op& op : graph.ops) {
    if (op.name != "distogram" && op.name != "loss") continue;
    for (plan::SubOpId part : plan->parts[op.id.index()]) EXPECT_EQ(plan->sub_op(part).device, 1) << op.name;
  }
}

TEST(ThreeFOneBPolicy, TrainsExactly) {
  for (const auto& [config, layers] :
       {std::pair{ParallelConfig{.pp = 2, .micro_batches = 4, .schedule = plan::ScheduleKind::three_f_one_b}, 2},
        std::pair{ParallelConfig{.tp = 2, .pp = 2, .micro_batches = 2, .schedule = plan::ScheduleKind::three_f_one_b}, 2},
        std::pair{ParallelConfig{.pp = 4, .micro_batches = 4, .schedule = plan::ScheduleKind::three_f_one_b}, 4}}) {
    testing::expect_exec_trains_as_one_device(deep("alphafold2-87m", layers, true), "megatron", config);
  }
}

TEST(ThreeFOneBPolicy, RefusesOnePassPipelinesOfOneStageAndRecyclesWithABackward) {
  const auto refused = [](const ir::Graph& graph, const ParallelConfig& config, std::string_view text) {
    auto plan = plan::make_plan(graph, ops::builtin_ops());
    ASSERT_TRUE(plan);
    auto applied = apply_policy(*plan, "megatron", config);
    ASSERT_FALSE(applied) << text;
    EXPECT_NE(applied.error().message.find(text), std::string::npos) << applied.error().to_string();
  };
  constexpr auto k3F1B = plan::ScheduleKind::three_f_one_b;
  refused(deep("gpt3-125m", 2, true), {.pp = 2, .micro_batches = 2, .schedule = k3F1B}, "runs each layer once");
  refused(deep("alphafold2-87m", 2, true), {.micro_batches = 2, .schedule = k3F1B}, "but pp is 1");
  refused(deep("alphafold2-87m", 2, true), {.pp = 2, .micro_batches = 4, .schedule = k3F1B, .virtual_stages = 2},
          "--interleave 2 was given");
  // The same layer twice without a detach between: the first pass has a backward.
  ir::GraphBuilder b("twice", ops::builtin_ops());
  ir::TensorId h = b.input("x", ir::Shape{4, 8}, ir::DType::f32);
  const ir::TensorId w = b.parameter("layers.0.w", ir::Shape{8, 8}, ir::DType::f32);
  for (int pass = 0; pass < 2; ++pass) {
    auto scope = b.scope(fmt::format("iteration{}", pass));
    auto layer = b.scope("layers.0");
    h = b.op("linear", "fc", {h, w});
  }
  b.set_loss(b.op("mean", "loss", {h}));
  auto forward = std::move(b).finish();
  ASSERT_TRUE(forward) << forward.error().to_string();
  auto graph = ir::build_training_graph(*forward, ops::builtin_ops(), {.kind = ir::OptimizerKind::sgd});
  ASSERT_TRUE(graph) << graph.error().to_string();
  EXPECT_EQ(layer_passes(*graph), 2);
  refused(*graph, {.pp = 2, .micro_batches = 2, .schedule = k3F1B}, "'iteration0.layers.0.fc' (pass 1 of 2) has a backward");
}

}  // namespace
}  // namespace loom::policy
