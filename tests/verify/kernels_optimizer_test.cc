#include <gtest/gtest.h>

#include <cmath>

#include "kernel_test_util.h"

namespace loom::verify::testing {
namespace {

const NdArray kParam = array({2}, {1.0, -2.0});
const NdArray kGrad = array({2}, {0.5, 0.25});
const NdArray kZeros(ir::Shape{2}, 0.0);

std::vector<NdArray> step(const std::string& type, const ir::Attrs& attrs, const std::vector<NdArray>& inputs) {
  auto out = forward(type, attrs, inputs);
  EXPECT_TRUE(out) << (out ? "" : out.error().to_string());
  return out ? *out : std::vector<NdArray>{};
}

TEST(OptimizerKernels, Sgd) {
  expect_values(step("sgd", {{"lr", 0.1}}, {kParam, kGrad})[0], {0.95, -2.025});
  // Momentum's first step: the buffer is the gradient.
  auto out = step("sgd", {{"lr", 0.1}, {"momentum", 0.9}}, {kParam, kGrad, kZeros});
  ASSERT_EQ(out.size(), 2u);
  expect_values(out[0], {0.95, -2.025});
  expect_values(out[1], {0.5, 0.25});
  // A later step: buf = 0.9 * buf + g.
  out = step("sgd", {{"lr", 0.1}, {"momentum", 0.9}, {"step", std::int64_t{2}}}, {kParam, kGrad, array({2}, {1, 1})});
  expect_values(out[1], {1.4, 1.15});
  expect_values(out[0], {1 - 0.14, -2 - 0.115});
  // L2 weight decay joins the gradient.
  expect_values(step("sgd", {{"lr", 0.1}, {"weight_decay", 0.5}}, {kParam, kGrad})[0], {0.9, -1.925});
}

TEST(OptimizerKernels, AdamFirstStepMovesByLr) {
  // At step 1 the bias-corrected update is g / (|g| + eps): about lr in the gradient's sign.
  auto out = step("adam", {{"lr", 0.01}, {"beta1", 0.9}, {"beta2", 0.95}, {"eps", 1e-8}}, {kParam, kGrad, kZeros, kZeros});
  ASSERT_EQ(out.size(), 3u);
  expect_values(out[0], {1 - 0.01 * 0.5 / (0.5 + 1e-8), -2 - 0.01 * 0.25 / (0.25 + 1e-8)});
  expect_values(out[1], {0.05, 0.025});
  expect_values(out[2], {0.05 * 0.25, 0.05 * 0.0625});
}

TEST(OptimizerKernels, AdamSecondStepAndWeightDecay) {
  const ir::Attrs attrs{{"lr", 0.1}, {"beta1", 0.9}, {"beta2", 0.99}, {"eps", 1e-8}, {"step", std::int64_t{2}}};
  const NdArray m = array({2}, {0.1, 0.2}), v = array({2}, {0.01, 0.02});
  auto out = step("adam", attrs, {kParam, kGrad, m, v});
  for (std::size_t i = 0; i < 2; ++i) {
    const double g = kGrad.data[i];
    const double m2 = 0.9 * m.data[i] + 0.1 * g, v2 = 0.99 * v.data[i] + 0.01 * g * g;
    const double update = 0.1 * (m2 / (1 - 0.81)) / (std::sqrt(v2 / (1 - 0.9801)) + 1e-8);
    EXPECT_NEAR(out[0].data[i], kParam.data[i] - update, 1e-12);
    EXPECT_NEAR(out[1].data[i], m2, 1e-15);
    EXPECT_NEAR(out[2].data[i], v2, 1e-15);
  }
  // AdamW decays the parameter before the Adam step; Adam adds the decay to the gradient.
  ir::Attrs decayed = attrs;
  decayed["weight_decay"] = 0.5;
  auto adamw = step("adamw", decayed, {kParam, kGrad, m, v});
  for (std::size_t i = 0; i < 2; ++i) EXPECT_NEAR(adamw[0].data[i], out[0].data[i] - 0.1 * 0.5 * kParam.data[i], 1e-12);
  auto adam_l2 = step("adam", decayed, {kParam, kGrad, m, v});
  EXPECT_NEAR(adam_l2[1].data[0], 0.9 * 0.1 + 0.1 * (0.5 + 0.5 * 1.0), 1e-15);
}

TEST(OptimizerKernels, MasterWeightsCarryTheUpdate) {
  // The update runs on the master copy; the parameter output equals the master output.
  const NdArray master = array({2}, {1.001, -2.001});
  auto out = step("sgd", {{"lr", 0.1}, {"master_weights", true}}, {kParam, kGrad, master});
  ASSERT_EQ(out.size(), 2u);
  expect_values(out[1], {1.001 - 0.05, -2.001 - 0.025});
  EXPECT_EQ(out[0], out[1]);
  auto adam = step("adamw", {{"master_weights", true}}, {kParam, kGrad, master, kZeros, kZeros});
  ASSERT_EQ(adam.size(), 4u);
  EXPECT_EQ(adam[0], adam[1]);
}

TEST(OptimizerKernels, Errors) {
  EXPECT_FALSE(forward("adam", {}, {kParam, kGrad}));
  EXPECT_FALSE(forward("sgd", {{"momentum", 0.9}}, {kParam, kGrad}));
  EXPECT_FALSE(forward("sgd", {}, {kParam, array({3}, {1, 2, 3})}));
}

}  // namespace
}  // namespace loom::verify::testing
