// Shorthands for the kernel tests: run a kernel's forward by type, build arrays from literals.
#pragma once

#include <gtest/gtest.h>

#include <vector>

#include "gradient_check.h"
#include "loom/verify/ndarray_ops.h"

namespace loom::verify::testing {

inline NdArray array(ir::Shape shape, std::vector<double> values) { return NdArray(std::move(shape), std::move(values)); }

inline Expected<std::vector<NdArray>> forward(const std::string& type, const ir::Attrs& attrs, const std::vector<NdArray>& inputs) {
  const Kernel* kernel = reference_kernels().find(type);
  if (kernel == nullptr) return fail("no kernel for " + type);
  return run_forward(*kernel, attrs, inputs);
}

// The first output of a forward that must succeed.
inline NdArray forward_ok(const std::string& type, const ir::Attrs& attrs, const std::vector<NdArray>& inputs) {
  auto out = forward(type, attrs, inputs);
  EXPECT_TRUE(out) << type << ": " << (out ? "" : out.error().to_string());
  if (!out || out->empty()) return {};
  return (*out)[0];
}

inline void expect_values(const NdArray& actual, const std::vector<double>& expected, double tolerance = 1e-12) {
  ASSERT_EQ(actual.data.size(), expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) EXPECT_NEAR(actual.data[i], expected[i], tolerance) << "element " << i;
}

}  // namespace loom::verify::testing
