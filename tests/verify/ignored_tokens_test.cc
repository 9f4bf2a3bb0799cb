// A cross-entropy loss over labels with ignored tokens (-100), divided by the whole batch's counted tokens
// (a derived input, ir/derived_input.h): split across two data-parallel devices and into four micro-batches
// of a 1F1B pipeline, it equals the single-device run, which equals torch's mean over the counted tokens.
// The count is one whole-batch scalar every part reads, so no micro-batch waits for another's labels.
#include <gtest/gtest.h>

#include <cmath>

#include "loom/ir/autograd.h"
#include "loom/ir/graph_builder.h"
#include "loom/ops/registry.h"
#include "loom/plan/micro_batches.h"
#include "loom/plan/primitives.h"
#include "loom/plan/schedule.h"
#include "loom/plan/validate.h"
#include "loom/verify/graph_interpreter.h"
#include "loom/verify/plan_interpreter.h"

namespace loom::verify {
namespace {

using plan::Plan;
using plan::SubOpId;

constexpr int kTokens = 8, kClasses = 5, kMicroBatches = 4;

// x[8, 6] -> 2 x (linear, gelu) -> head (linear 6 -> 5) -> cross_entropy against labels[8] / counted tokens.
const ir::Graph& classifier() {
  static const ir::Graph graph = [] {
    ir::GraphBuilder b("ignored", ops::builtin_ops());
    ir::TensorId h = b.input("x", ir::Shape{kTokens, 6}, ir::DType::f32);
    const ir::TensorId labels = b.input("labels", ir::Shape{kTokens}, ir::DType::i64);
    const ir::TensorId count = b.derived_input("labels.counted_tokens", {.from = labels, .ignore_index = -100});
    for (int l = 0; l < 2; ++l) {
      const ir::TensorId w = b.parameter(fmt::format("layer{}.weight", l), ir::Shape{6, 6}, ir::DType::f32);
      h = b.op("gelu", fmt::format("layer{}.act", l), {b.op("linear", fmt::format("layer{}.fc", l), {h, w})});
    }
    const ir::TensorId head = b.parameter("head.weight", ir::Shape{kClasses, 6}, ir::DType::f32);
    const ir::TensorId logits = b.op("linear", "head", {h, head});
    b.set_loss(b.op("cross_entropy", "loss", {logits, labels, count}, {{"ignore_index", std::int64_t{-100}}}));
    auto forward = std::move(b).finish();
    EXPECT_TRUE(forward) << forward.error().to_string();
    auto training = ir::build_training_graph(*forward, ops::builtin_ops(), {.kind = ir::OptimizerKind::sgd, .lr = 0.1});
    EXPECT_TRUE(training) << training.error().to_string();
    return *training;
  }();
  return graph;
}

ir::TensorId named(const ir::Graph& g, std::string_view name) {
  for (const ir::FullTensor& t : g.tensors)
    if (t.name == name) return t.id;
  ADD_FAILURE() << "no tensor " << name;
  return {};
}

// The drawn leaves with tokens 1, 4 and 5 ignored (two of them in one micro-batch), the count recomputed.
std::vector<NdArray> leaves_with_ignored_tokens(const ir::Graph& g) {
  std::vector<NdArray> values = initial_values(g, 5);
  for (int t : {1, 4, 5}) values[named(g, "labels").index()].data[static_cast<std::size_t>(t)] = -100;
  fill_derived_inputs(g, values);
  return values;
}

// torch's F.cross_entropy(logits, labels, ignore_index=-100): the mean over counted tokens.
double torch_mean(const NdArray& logits, const NdArray& labels) {
  double total = 0, counted = 0;
  for (int t = 0; t < kTokens; ++t) {
    const double label = labels.data[static_cast<std::size_t>(t)];
    if (label == -100) continue;
    const double* row = logits.data.data() + t * kClasses;
    double peak = -INFINITY, sum = 0;
    for (int c = 0; c < kClasses; ++c) peak = std::max(peak, row[c]);
    for (int c = 0; c < kClasses; ++c) sum += std::exp(row[c] - peak);
    total += peak + std::log(sum) - row[static_cast<int>(label)];
    counted += 1;
  }
  return total / counted;
}

void expect_equal_to_single_device(const Plan& plan, int devices) {
  const ir::Graph& g = *plan.graph;
  const std::vector<NdArray> initial = leaves_with_ignored_tokens(g);
  EXPECT_EQ(initial[named(g, "labels.counted_tokens").index()].data[0], 5.0);
  auto reference = run_graph(g, initial);
  ASSERT_TRUE(reference) << reference.error().to_string();
  const double loss = (*reference)[g.loss.index()].data[0];
  EXPECT_NEAR(loss, torch_mean((*reference)[named(g, "head").index()], initial[named(g, "labels").index()]), 1e-12);
  auto run = run_plan(plan, devices, initial);
  ASSERT_TRUE(run) << run.error().to_string();
  auto c = compare_runs(g, *reference, run->values);
  ASSERT_TRUE(c) << c.error().to_string();
  for (const auto& [role, stat] : {std::pair{"activation", c->activation}, std::pair{"gradient", c->gradient},
                                   std::pair{"updated", c->updated}, std::pair{"loss", c->loss}})
    EXPECT_LT(stat.max_rel, 1e-9) << role << ": " << stat.worst << " rel " << stat.max_rel;
}

TEST(IgnoredTokens, DataParallelLossEqualsTheSingleDeviceMean) {
  const ir::Graph& g = classifier();
  auto made = plan::make_plan(g, ops::builtin_ops());
  ASSERT_TRUE(made) << made.error().to_string();
  Plan plan = *made;
  for (const ir::Op& op : g.ops) {
    const SubOpId whole = plan.parts[op.id.index()].front();
    if (op.pass == ir::Pass::forward) {
      const auto batch = plan::dim_identifier(plan, whole, false, 0, 0);
      ASSERT_TRUE(batch) << op.name;
      auto parts = plan::trans(plan, whole, plan::SplitAlgo{*batch}, 2);
      ASSERT_TRUE(parts) << op.name << ": " << parts.error().to_string();
      for (int k = 0; k < 2; ++k) ASSERT_TRUE(plan::assign(plan, (*parts)[static_cast<std::size_t>(k)], k));
    } else if (!op.is_mirror()) {
      auto parts = plan::trans(plan, whole, plan::ReplicateAlgo{}, 2);
      ASSERT_TRUE(parts) << op.name << ": " << parts.error().to_string();
      for (int k = 0; k < 2; ++k) ASSERT_TRUE(plan::assign(plan, (*parts)[static_cast<std::size_t>(k)], k));
    }
  }
  const auto valid = plan::validate_plan(plan, 2);
  ASSERT_TRUE(valid) << valid.error().to_string();
  expect_equal_to_single_device(plan, 2);
}

// Layer 0 is stage 0; layer 1, the head and the loss stage 1; four micro-batches in 1F1B order.
TEST(IgnoredTokens, OneFOneBPipelineLossEqualsTheSingleDeviceMean) {
  const ir::Graph& g = classifier();
  auto made = plan::make_plan(g, ops::builtin_ops());
  ASSERT_TRUE(made) << made.error().to_string();
  Plan plan = *made;
  const auto stage_of = [](std::string_view name) { return name.starts_with("layer0") ? 0 : 1; };
  std::vector<ir::OpId> forward;
  std::vector<std::vector<ir::OpId>> stage_ops(2);
  for (const ir::Op& op : g.ops)
    if (op.pass == ir::Pass::forward) {
      forward.push_back(op.id);
      stage_ops[static_cast<std::size_t>(stage_of(op.name))].push_back(op.id);
    }
  auto mb = plan::split_micro_batches(plan, forward, kMicroBatches);
  ASSERT_TRUE(mb) << mb.error().to_string();
  std::vector<std::vector<std::vector<SubOpId>>> stages(2);
  for (std::size_t s = 0; s < 2; ++s)
    for (int m = 0; m < kMicroBatches; ++m) {
      stages[s].push_back(mb->micro_batch(stage_ops[s], m));
      ASSERT_TRUE(plan::stage(plan, stages[s].back(), static_cast<int>(s)));
    }
  for (const ir::Op& op : g.ops) {
    if (op.pass == ir::Pass::forward || op.is_mirror()) continue;
    const int s = op.pass == ir::Pass::optimizer ? stage_of(g.tensor(op.inputs[0]).name) : 1;
    ASSERT_TRUE(plan::stage(plan, plan.parts[op.id.index()], s)) << op.name;
  }
  auto blocks = plan::apply_schedule(plan, {plan::ScheduleKind::one_f_one_b}, stages);
  ASSERT_TRUE(blocks) << blocks.error().to_string();
  const auto valid = plan::validate_plan(plan, 2);  // a cycle here would be the deadlock of an in-graph count
  ASSERT_TRUE(valid) << valid.error().to_string();
  ASSERT_TRUE(plan::complete_order(plan, 2));
  expect_equal_to_single_device(plan, 2);
}

}  // namespace
}  // namespace loom::verify
