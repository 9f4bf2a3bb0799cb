// The small graph shared by the JSON and validation tests.
// Tensors: 0 x, 1 w, 2 v, 3 fc, 4 loss. Ops: 0 fc, 1 loss.
#pragma once

#include <gtest/gtest.h>

#include "loom/ir/graph_builder.h"
#include "loom/ops/registry.h"

namespace loom::ir::testing {

// x[2, 3] -> linear(w[4, 3]) -> fc[2, 4]; loss = sum(fc * v) via einsum "ij,ij->".
inline Graph tiny_graph() {
  GraphBuilder b("tiny", ops::builtin_ops());
  TensorId x = b.input("x", {2, 3}, DType::f32);
  TensorId w = b.parameter("w", {4, 3}, DType::f32);
  TensorId v = b.parameter("v", {2, 4}, DType::f32);
  TensorId fc = b.op("linear", "fc", {x, w});
  b.set_loss(b.op("einsum", "loss", {fc, v}, {{"equation", std::string("ij,ij->")}}));
  Expected<Graph> graph = std::move(b).finish();
  EXPECT_TRUE(graph) << graph.error().to_string();
  return graph.value_or(Graph{});
}

}  // namespace loom::ir::testing
