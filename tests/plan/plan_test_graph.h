// A small training graph for plan tests: x[4, 8] -> fc1 (linear 8->16, bias) -> gelu -> fc2
// (linear 16->6, bias) -> cross_entropy(labels[4]), with backward and AdamW steps.
#pragma once

#include <gtest/gtest.h>

#include "loom/ir/autograd.h"
#include "loom/ir/graph_builder.h"
#include "loom/ops/registry.h"
#include "loom/plan/plan.h"
#include "loom/plan/primitives.h"

namespace loom::plan::testing {

inline ir::Graph mlp_training_graph() {
  ir::GraphBuilder b("mlp", ops::builtin_ops());
  const ir::TensorId x = b.input("x", ir::Shape{4, 8}, ir::DType::f32);
  const ir::TensorId labels = b.input("labels", ir::Shape{4}, ir::DType::i64);
  const ir::TensorId w1 = b.parameter("fc1.weight", ir::Shape{16, 8}, ir::DType::f32);
  const ir::TensorId b1 = b.parameter("fc1.bias", ir::Shape{16}, ir::DType::f32);
  const ir::TensorId w2 = b.parameter("fc2.weight", ir::Shape{6, 16}, ir::DType::f32);
  const ir::TensorId b2 = b.parameter("fc2.bias", ir::Shape{6}, ir::DType::f32);
  const ir::TensorId h = b.op("linear", "fc1", {x, w1, b1});
  const ir::TensorId a = b.op("gelu", "act", {h});
  const ir::TensorId logits = b.op("linear", "fc2", {a, w2, b2});
  b.set_loss(b.op("cross_entropy", "loss", {logits, labels}));
  auto forward = std::move(b).finish();
  EXPECT_TRUE(forward) << forward.error().to_string();
  auto training = ir::build_training_graph(*forward, ops::builtin_ops(), {});
  EXPECT_TRUE(training) << training.error().to_string();
  return *training;
}

// One MLP graph per test binary (plans keep a pointer to their graph, so it must outlive them).
inline const ir::Graph& graph() {
  static const ir::Graph g = mlp_training_graph();
  return g;
}

// A plan of graph(): one whole, unassigned sub-op per op.
inline Plan fresh_plan() {
  auto plan = make_plan(graph(), ops::builtin_ops());
  EXPECT_TRUE(plan) << plan.error().to_string();
  return *plan;
}

inline SubOpId only_part(const Plan& plan, std::string_view op_name) {
  for (const ir::Op& op : plan.graph->ops)
    if (op.name == op_name) {
      EXPECT_EQ(plan.parts[op.id.index()].size(), 1u) << op_name;
      return plan.parts[op.id.index()].front();
    }
  ADD_FAILURE() << "no op " << op_name;
  return {};
}

inline void assign_all(Plan& plan, int device) {
  for (SubOpId id : plan.live_sub_ops())
    if (!plan.op_of(id).is_mirror()) {
      EXPECT_TRUE(assign(plan, id, device));
    }
}

}  // namespace loom::plan::testing
