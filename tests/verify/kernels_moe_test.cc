#include <gtest/gtest.h>

#include <cmath>

#include "gradient_check.h"
#include "loom/ops/registry.h"

namespace loom::verify {
namespace {

using ir::Shape;
using testing::expect_gradients_match;
using testing::random_array;
using testing::random_indices;
using testing::run_forward;

std::vector<NdArray> forward(std::string_view type, const ir::Attrs& attrs, const std::vector<NdArray>& inputs) {
  const Kernel* kernel = reference_kernels().find(type);
  EXPECT_NE(kernel, nullptr) << type;
  auto out = run_forward(*kernel, attrs, inputs);
  EXPECT_TRUE(out) << out.error().to_string();
  return out ? *out : std::vector<NdArray>{};
}

double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }

// Two experts with logits (x, -x): expert 0 has probability sigmoid(2x).
const NdArray kTwoExpertGate(Shape{2, 1}, {1, -1});

TEST(MoeKernels, TopOneGateDropsTokensBeyondCapacity) {
  const NdArray x(Shape{1, 3, 1}, {1, 2, -1});
  const auto out = forward("moe_gate", {{"top_k", std::int64_t{1}}, {"capacity", std::int64_t{1}}}, {x, kTwoExpertGate});
  ASSERT_EQ(out.size(), 2u);
  const NdArray &combine = out[0], &dispatch = out[1];
  ASSERT_EQ(combine.shape, (Shape{1, 3, 2, 1}));
  // [t e c]: token 0 -> expert 0, token 1 also prefers expert 0 but it is full, token 2 -> expert 1.
  const std::vector<double> mask = {1, 0, 0, 0, 0, 1};
  const std::vector<double> weights = {sigmoid(2), 0, 0, 0, 0, sigmoid(2)};
  for (std::size_t i = 0; i < mask.size(); ++i) {
    EXPECT_EQ(dispatch.data[i], mask[i]) << i;
    EXPECT_NEAR(combine.data[i], weights[i], 1e-12) << i;
  }
}

TEST(MoeKernels, TopTwoGateServesFirstChoicesBeforeSecondChoices) {
  const NdArray x(Shape{1, 3, 1}, {1, 2, -1});
  const auto out = forward("moe_gate", {{"capacity", std::int64_t{2}}}, {x, kTwoExpertGate});  // top_k defaults to 2
  const NdArray& dispatch = out[1];
  ASSERT_EQ(dispatch.shape, (Shape{1, 3, 2, 2}));
  // First choices: t0 -> e0 slot 0, t1 -> e0 slot 1, t2 -> e1 slot 0. Second choices: t0 -> e1 slot 1,
  // then e1 and e0 are full. Layout [t e c].
  const std::vector<double> mask = {1, 0, 0, 1, /**/ 0, 1, 0, 0, /**/ 0, 0, 1, 0};
  EXPECT_EQ(dispatch.data, mask);
  // Weights renormalise over the chosen pair, which is every expert here: p itself.
  EXPECT_NEAR(out[0].data[0], sigmoid(2), 1e-12);
  EXPECT_NEAR(out[0].data[3], 1 - sigmoid(2), 1e-12);
  EXPECT_NEAR(out[0].data[5], sigmoid(4), 1e-12);
}

TEST(MoeKernels, DispatchThenCombineWithIdentityExpertsScalesTokensByTheirKeptWeights) {
  std::mt19937_64 rng(4);
  const NdArray x = random_array(Shape{2, 4, 3}, rng), gate = random_array(Shape{3, 3}, rng);
  const auto routed = forward("moe_gate", {{"capacity", std::int64_t{2}}}, {x, gate});
  const NdArray slots = forward("moe_dispatch", {}, {x, routed[1]})[0];
  ASSERT_EQ(slots.shape, (Shape{3, 2, 2, 3}));
  const NdArray y = forward("moe_combine", {}, {slots, routed[0]})[0];
  ASSERT_EQ(y.shape, x.shape);
  for (std::int64_t token = 0; token < 8; ++token) {
    double kept = 0;
    for (std::int64_t i = 0; i < 6; ++i) kept += routed[0].data[static_cast<std::size_t>(token * 6 + i)];
    for (std::int64_t h = 0; h < 3; ++h) {
      const std::size_t at = static_cast<std::size_t>(token * 3 + h);
      EXPECT_NEAR(y.data[at], kept * x.data[at], 1e-12);
    }
  }
}

TEST(MoeKernels, GateGradientTopOne) {
  std::mt19937_64 rng(21);
  expect_gradients_match("moe_gate", {{"top_k", std::int64_t{1}}, {"capacity", std::int64_t{2}}},
                         {random_array(Shape{2, 4, 3}, rng), random_array(Shape{3, 3}, rng)}, {true, true});
}

TEST(MoeKernels, GateGradientTopTwoWithDrops) {
  std::mt19937_64 rng(22);
  expect_gradients_match("moe_gate", {{"top_k", std::int64_t{2}}, {"capacity", std::int64_t{1}}},
                         {random_array(Shape{1, 5, 2}, rng), random_array(Shape{3, 2}, rng)}, {true, true});
}

TEST(MoeKernels, GateGradientTopTwoOfFour) {
  std::mt19937_64 rng(23);
  expect_gradients_match("moe_gate", {{"top_k", std::int64_t{2}}, {"capacity", std::int64_t{4}}},
                         {random_array(Shape{2, 3, 3}, rng), random_array(Shape{4, 3}, rng)}, {true, true});
}

TEST(MoeKernels, DispatchGradientSkipsTheMask) {
  std::mt19937_64 rng(24);
  expect_gradients_match("moe_dispatch", {}, {random_array(Shape{2, 3, 2}, rng), random_indices(Shape{2, 3, 2, 2}, 2, rng)},
                         {true, false});
}

TEST(MoeKernels, CombineGradient) {
  std::mt19937_64 rng(25);
  expect_gradients_match("moe_combine", {}, {random_array(Shape{3, 2, 2, 2}, rng), random_array(Shape{2, 3, 3, 2}, rng)},
                         {true, true});
}

TEST(MoeKernels, BadInputsAreErrorsNamingTheOp) {
  const std::vector<std::tuple<std::string, ir::Attrs, std::vector<NdArray>>> cases = {
      {"moe_gate", {{"capacity", std::int64_t{1}}}, {NdArray(Shape{1, 2, 3}), NdArray(Shape{2, 4})}},
      {"moe_gate", {{"capacity", std::int64_t{1}}, {"top_k", std::int64_t{3}}}, {NdArray(Shape{1, 2, 3}), NdArray(Shape{2, 3})}},
      {"moe_gate", {}, {NdArray(Shape{1, 2, 3}), NdArray(Shape{2, 3})}},
      {"moe_dispatch", {}, {NdArray(Shape{1, 2, 3}), NdArray(Shape{1, 3, 2, 2})}},
      {"moe_combine", {}, {NdArray(Shape{2, 1, 2, 3})}},
  };
  for (const auto& [type, attrs, inputs] : cases) {
    auto out = run_forward(*reference_kernels().find(type), attrs, inputs);
    ASSERT_FALSE(out) << type;
    EXPECT_NE(out.error().message.find(type), std::string::npos) << out.error().message;
  }
}

}  // namespace
}  // namespace loom::verify
