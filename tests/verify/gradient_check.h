// Finite-difference check of a reference kernel's backward: for random inputs x and a random
// upstream gradient g, the analytic gradient of L(x) = <g, forward(x)> must match the central
// difference (L(x + h e_i) - L(x - h e_i)) / 2h for every floating input element.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "loom/verify/kernels.h"

namespace loom::verify::testing {

inline NdArray random_array(const ir::Shape& shape, std::mt19937_64& rng, double lo = -1.0, double hi = 1.0) {
  std::uniform_real_distribution<double> dist(lo, hi);
  NdArray a(shape);
  for (double& v : a.data) v = dist(rng);
  return a;
}

// Integer-valued array (ids, labels) in [0, bound).
inline NdArray random_indices(const ir::Shape& shape, std::int64_t bound, std::mt19937_64& rng) {
  std::uniform_int_distribution<std::int64_t> dist(0, bound - 1);
  NdArray a(shape);
  for (double& v : a.data) v = static_cast<double>(dist(rng));
  return a;
}

inline Expected<std::vector<NdArray>> run_forward(const Kernel& kernel, const ir::Attrs& attrs,
                                                  const std::vector<NdArray>& inputs) {
  KernelContext ctx{attrs, {}, {}, {}, {}};
  return kernel.forward(ctx, inputs);
}

// differentiable[i] says whether input i gets a gradient (false for ids, labels, masks).
inline void expect_gradients_match(const std::string& type, const ir::Attrs& attrs, std::vector<NdArray> inputs,
                                   const std::vector<bool>& differentiable, std::uint64_t seed = 7,
                                   double tolerance = 1e-6, double step = 1e-6) {
  const Kernel* kernel = reference_kernels().find(type);
  ASSERT_NE(kernel, nullptr) << "no reference kernel for '" << type << "'";
  ASSERT_TRUE(kernel->backward) << "'" << type << "' has no backward kernel";
  auto outputs = run_forward(*kernel, attrs, inputs);
  ASSERT_TRUE(outputs) << type << ": " << outputs.error().to_string();
  std::mt19937_64 rng(seed);
  std::vector<NdArray> upstream;
  for (const NdArray& out : *outputs) upstream.push_back(random_array(out.shape, rng));
  KernelContext ctx{attrs, {}, {}, {}, {}};
  auto grads = kernel->backward(ctx, inputs, *outputs, upstream);
  ASSERT_TRUE(grads) << type << ": " << grads.error().to_string();
  ASSERT_EQ(grads->size(), inputs.size()) << type << ": one gradient slot per input";

  const auto objective = [&](const std::vector<NdArray>& x) {
    auto out = run_forward(*kernel, attrs, x);
    EXPECT_TRUE(out);
    double total = 0;
    for (std::size_t o = 0; o < out->size(); ++o)
      for (std::size_t i = 0; i < (*out)[o].data.size(); ++i) total += upstream[o].data[i] * (*out)[o].data[i];
    return total;
  };
  for (std::size_t t = 0; t < inputs.size(); ++t) {
    if (!differentiable[t]) {
      EXPECT_TRUE((*grads)[t].data.empty()) << type << ": input " << t << " should get no gradient";
      continue;
    }
    ASSERT_EQ((*grads)[t].shape, inputs[t].shape) << type << ": gradient " << t << " shape";
    for (std::size_t i = 0; i < inputs[t].data.size(); ++i) {
      std::vector<NdArray> plus = inputs, minus = inputs;
      plus[t].data[i] += step;
      minus[t].data[i] -= step;
      const double numeric = (objective(plus) - objective(minus)) / (2 * step);
      const double analytic = (*grads)[t].data[i];
      EXPECT_NEAR(analytic, numeric, tolerance * std::max(1.0, std::abs(numeric)))
          << type << ": d/d input " << t << " element " << i;
    }
  }
}

}  // namespace loom::verify::testing
