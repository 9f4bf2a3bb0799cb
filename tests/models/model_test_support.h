// Helpers shared by the model zoo tests: totals and lookups recomputed from a built graph,
// independently of the model code.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "loom/ir/autograd.h"
#include "loom/ir/graph.h"
#include "loom/ir/graph_stats.h"
#include "loom/ir/validate.h"
#include "loom/models/zoo.h"
#include "loom/ops/registry.h"

namespace loom::models::testing {

// Sum of numel over graph.parameters.
inline std::int64_t parameter_count(const ir::Graph& graph) {
  std::int64_t total = 0;
  for (ir::TensorId id : graph.parameters) total += graph.tensor(id).shape.numel();
  return total;
}

// Forward FLOPs of the whole graph: every op resolved again against the built-in registry.
inline double total_forward_flops(const ir::Graph& graph) {
  Expected<std::vector<double>> flops = ir::op_flops(graph, ops::builtin_ops());
  EXPECT_TRUE(flops.has_value()) << (flops ? "" : flops.error().to_string());
  double total = 0;
  if (flops)
    for (double f : *flops) total += f;
  return total;
}

inline const ir::Op* find_op(const ir::Graph& graph, std::string_view name) {
  for (const ir::Op& op : graph.ops)
    if (op.name == name) return &op;
  return nullptr;
}

inline const ir::FullTensor* find_tensor(const ir::Graph& graph, std::string_view name) {
  for (const ir::FullTensor& tensor : graph.tensors)
    if (tensor.name == name) return &tensor;
  return nullptr;
}

inline std::size_t count_ops(const ir::Graph& graph, std::string_view type) {
  std::size_t n = 0;
  for (const ir::Op& op : graph.ops) n += op.type == type ? 1 : 0;
  return n;
}

// The training graph's (forward, backward, AdamW) stats, or empty stats after a test failure naming the error.
inline ir::GraphStats training_stats(const ir::Graph& forward) {
  auto training = ir::build_training_graph(forward, ops::builtin_ops(), {});
  EXPECT_TRUE(training) << training.error().to_string();
  auto stats = training ? ir::compute_stats(*training, ops::builtin_ops()) : Expected<ir::GraphStats>(ir::GraphStats{});
  EXPECT_TRUE(stats) << stats.error().to_string();
  return stats.value_or(ir::GraphStats{});
}

// (actual - nominal) / nominal
inline double relative_gap(double actual, double nominal) { return (actual - nominal) / nominal; }

// Builds a preset or fails the test with the builder's message.
inline ir::Graph build_or_fail(std::string_view preset, const ModelOptions& options = {}) {
  Expected<ir::Graph> graph = build_model(preset, options);
  EXPECT_TRUE(graph.has_value()) << preset << ": " << (graph ? "" : graph.error().to_string());
  return graph ? std::move(*graph) : ir::Graph{};
}

// The graph passes semantic validation and the backward pass can be derived from it.
inline void expect_valid_for_training(const ir::Graph& graph) {
  const Expected<void> valid = ir::validate_graph(graph, ops::builtin_ops());
  EXPECT_TRUE(valid.has_value()) << graph.name << ": " << (valid ? "" : valid.error().to_string());
  const Expected<ir::Graph> backward = ir::add_backward(graph, ops::builtin_ops());
  EXPECT_TRUE(backward.has_value()) << graph.name << ": " << (backward ? "" : backward.error().to_string());
}

}  // namespace loom::models::testing
