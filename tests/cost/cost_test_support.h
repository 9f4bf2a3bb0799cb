// Shared by the cost tests: a GPU of round numbers, so expectations are closed forms, and small graphs
// finished with their backward pass.
#pragma once

#include <gtest/gtest.h>

#include "loom/cluster/gpu.h"
#include "loom/ir/autograd.h"
#include "loom/ir/graph_builder.h"
#include "loom/ops/registry.h"

namespace loom::cost::testing {

inline cluster::GpuSpec test_gpu(double peak_fp16 = 100e12) {
  return {.name = "test-gpu", .peak_bf16 = 100e12, .peak_fp16 = peak_fp16, .peak_fp32 = 10e12,
          .memory_bytes = std::int64_t{80} << 30, .memory_bandwidth = 1e12};
}

// The builder's graph with its backward pass; an empty graph (and a test failure) on error.
inline ir::Graph with_backward(ir::GraphBuilder&& b) {
  auto forward = std::move(b).finish();
  EXPECT_TRUE(forward) << forward.error().to_string();
  if (!forward) return {};
  auto full = ir::add_backward(*forward, ops::builtin_ops());
  EXPECT_TRUE(full) << full.error().to_string();
  return full.value_or(ir::Graph{});
}

}  // namespace loom::cost::testing
