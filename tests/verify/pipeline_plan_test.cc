// A two-stage pipeline built with the plan helpers (micro-batches, stages, schedule templates) and
// checked three ways: the plan validates, the completed per-device order follows the template's blocks,
// and running it equals the single-device run (weight gradients summed over micro-batches as value parts).
#include <gtest/gtest.h>

#include <map>

#include "loom/ir/autograd.h"
#include "loom/ir/graph_builder.h"
#include "loom/ops/registry.h"
#include "loom/plan/micro_batches.h"
#include "loom/plan/schedule.h"
#include "loom/plan/validate.h"
#include "loom/verify/graph_interpreter.h"
#include "loom/verify/plan_interpreter.h"

namespace loom::verify {
namespace {

using plan::Block;
using plan::Plan;
using plan::SubOpId;

constexpr int kLayers = 4;
constexpr int kMicroBatches = 4;

// x[8, 8] -> 4 x (linear 8->8 with bias, gelu) -> mean, trained with SGD.
const ir::Graph& four_layer_mlp() {
  static const ir::Graph graph = [] {
    ir::GraphBuilder b("mlp4", ops::builtin_ops());
    ir::TensorId h = b.input("x", ir::Shape{8, 8}, ir::DType::f32);
    for (int l = 0; l < kLayers; ++l) {
      const ir::TensorId w = b.parameter(fmt::format("layer{}.weight", l), ir::Shape{8, 8}, ir::DType::f32);
      const ir::TensorId bias = b.parameter(fmt::format("layer{}.bias", l), ir::Shape{8}, ir::DType::f32);
      h = b.op("gelu", fmt::format("layer{}.act", l), {b.op("linear", fmt::format("layer{}.fc", l), {h, w, bias})});
    }
    b.set_loss(b.op("mean", "loss", {h}));
    auto forward = std::move(b).finish();
    EXPECT_TRUE(forward) << forward.error().to_string();
    auto training = ir::build_training_graph(*forward, ops::builtin_ops(), {.kind = ir::OptimizerKind::sgd, .lr = 0.1});
    EXPECT_TRUE(training) << training.error().to_string();
    return *training;
  }();
  return graph;
}

// Layers 0-1 are stage 0, layers 2-3 and the loss stage 1.
int stage_of(std::string_view name) { return name.starts_with("layer0") || name.starts_with("layer1") ? 0 : 1; }

struct Pipeline {
  Plan plan;
  std::vector<std::vector<Block>> blocks;                // the template, per stage
  std::vector<std::vector<std::vector<SubOpId>>> stages;  // [stage][micro-batch] forward sub-ops
};

Pipeline build(plan::ScheduleKind kind) {
  const ir::Graph& g = four_layer_mlp();
  auto made = plan::make_plan(g, ops::builtin_ops());
  EXPECT_TRUE(made) << made.error().to_string();
  Pipeline p{*made, {}, {}};
  std::vector<ir::OpId> forward;
  std::vector<std::vector<ir::OpId>> stage_ops(2);
  for (const ir::Op& op : g.ops)
    if (op.pass == ir::Pass::forward) {
      forward.push_back(op.id);
      stage_ops[static_cast<std::size_t>(stage_of(op.name))].push_back(op.id);
    }
  auto mb = plan::split_micro_batches(p.plan, forward, kMicroBatches);
  EXPECT_TRUE(mb) << mb.error().to_string();
  if (!mb) return p;
  p.stages.resize(2);
  for (std::size_t s = 0; s < 2; ++s)
    for (int m = 0; m < kMicroBatches; ++m) {
      p.stages[s].push_back(mb->micro_batch(stage_ops[s], m));
      EXPECT_TRUE(plan::stage(p.plan, p.stages[s].back(), static_cast<int>(s)));
    }
  // Each optimizer step goes with its parameter's stage; the loss-gradient seed with the loss.
  for (const ir::Op& op : g.ops) {
    if (op.pass == ir::Pass::forward || op.is_mirror()) continue;
    const int s = op.pass == ir::Pass::optimizer ? stage_of(g.tensor(op.inputs[0]).name) : 1;
    EXPECT_TRUE(plan::stage(p.plan, p.plan.parts[op.id.index()], s)) << op.name;
  }
  auto blocks = plan::apply_schedule(p.plan, {kind}, p.stages);
  EXPECT_TRUE(blocks) << blocks.error().to_string();
  if (blocks) p.blocks = *blocks;
  return p;
}

// The (pass, micro-batch) of each block's first sub-op, in the order the device runs them.
std::vector<std::string> observed_blocks(const Pipeline& p, const std::vector<SubOpId>& program) {
  std::map<SubOpId, Block> first_of;
  for (const auto& seq : p.blocks)
    for (const Block& b : seq) {
      const auto& fwd = p.stages[static_cast<std::size_t>(b.stage)][static_cast<std::size_t>(b.micro_batch)];
      first_of[plan::block_sub_ops(p.plan, fwd, b.part).front()] = b;
    }
  std::vector<std::string> seen;
  for (SubOpId id : program)
    if (auto it = first_of.find(id); it != first_of.end()) seen.push_back(plan::to_string(it->second));
  return seen;
}

void check_pipeline(plan::ScheduleKind kind) {
  const Pipeline p = build(kind);
  ASSERT_EQ(p.blocks.size(), 2u);
  const auto valid = plan::validate_plan(p.plan, 2);
  ASSERT_TRUE(valid) << valid.error().to_string();
  const auto order = plan::complete_order(p.plan, 2);
  ASSERT_TRUE(order) << order.error().to_string();
  for (std::size_t s = 0; s < 2; ++s) {
    std::vector<std::string> expected;
    for (const Block& b : p.blocks[s]) expected.push_back(plan::to_string(b));
    EXPECT_EQ(observed_blocks(p, order->per_device[s]), expected) << "device " << s;
  }
  const std::vector<NdArray> initial = initial_values(*p.plan.graph, 11);
  auto reference = run_graph(*p.plan.graph, initial);
  ASSERT_TRUE(reference) << reference.error().to_string();
  auto run = run_plan(p.plan, 2, initial);
  ASSERT_TRUE(run) << run.error().to_string();
  auto c = compare_runs(*p.plan.graph, *reference, run->values);
  ASSERT_TRUE(c) << c.error().to_string();
  for (const auto& [role, stat] : {std::pair{"activation", c->activation}, std::pair{"gradient", c->gradient},
                                   std::pair{"updated", c->updated}, std::pair{"loss", c->loss}})
    EXPECT_LT(stat.max_rel, 1e-9) << role << ": " << stat.worst << " rel " << stat.max_rel;
}

TEST(PipelinePlan, GPipeTwoStagesFourMicroBatches) { check_pipeline(plan::ScheduleKind::gpipe); }

// Possible because the loss-gradient seed reads only the loss's shape (OpDef::shape_only_inputs).
TEST(PipelinePlan, OneFOneBTwoStagesFourMicroBatches) { check_pipeline(plan::ScheduleKind::one_f_one_b); }

}  // namespace
}  // namespace loom::verify
