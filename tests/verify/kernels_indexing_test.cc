// Reference kernels of comparisons, cumsum, index_select, pad and bilinear resizing: exact values
// (bilinear ones taken from torch.nn.functional.interpolate in float64), and gradients
// checked against finite differences where the op has them.
#include <gtest/gtest.h>

#include "kernel_test_util.h"

namespace loom::verify::testing {
namespace {

std::mt19937_64 rng(41);

using List = std::vector<std::int64_t>;

TEST(ComparisonKernels, BroadcastExactValues) {
  const NdArray ids = array({2, 3}, {1, 0, 2, 0, 0, 5});
  const NdArray zero = array({}, {0});
  expect_values(forward_ok("ne", {}, {ids, zero}), {1, 0, 1, 0, 0, 1});
  expect_values(forward_ok("eq", {}, {ids, zero}), {0, 1, 0, 1, 1, 0});
  const NdArray row = array({3}, {1, 1, 5});
  expect_values(forward_ok("lt", {}, {ids, row}), {0, 1, 1, 1, 1, 0});
  expect_values(forward_ok("le", {}, {ids, row}), {1, 1, 1, 1, 1, 1});
  expect_values(forward_ok("gt", {}, {ids, row}), {0, 0, 0, 0, 0, 0});
  expect_values(forward_ok("ge", {}, {ids, row}), {1, 0, 0, 0, 0, 1});
  EXPECT_FALSE(forward("ne", {}, {ids, array({2}, {0, 0})}));
  EXPECT_FALSE(reference_kernels().find("ne")->backward);
}

TEST(ComparisonKernels, MaximumMinimumValuesAndGradients) {
  const NdArray a = array({2, 2}, {1, -2, 3, 0.5});
  const NdArray b = array({2}, {0, 3});
  expect_values(forward_ok("maximum", {}, {a, b}), {1, 3, 3, 3});
  expect_values(forward_ok("minimum", {}, {a, b}), {0, -2, 0, 0.5});
  for (int trial = 0; trial < 4; ++trial) {
    expect_gradients_match("maximum", {}, {random_array({3, 4}, rng), random_array({4}, rng)}, {true, true}, 3 + trial);
    expect_gradients_match("minimum", {}, {random_array({2, 1, 3}, rng), random_array({2, 3}, rng)}, {true, true}, 5 + trial);
  }
  // A tie splits the gradient evenly, as torch.maximum does.
  const Kernel* maximum = reference_kernels().find("maximum");
  const ir::Attrs none;
  KernelContext ctx{none, {}, {}, {}, {}};
  const NdArray x = array({1}, {2}), y = array({1}, {2}), g = array({1}, {1});
  auto grads = maximum->backward(ctx, std::vector<NdArray>{x, y}, std::vector<NdArray>{x}, std::vector<NdArray>{g});
  ASSERT_TRUE(grads) << grads.error().to_string();
  expect_values((*grads)[0], {0.5});
  expect_values((*grads)[1], {0.5});
}

TEST(CumsumKernel, RobertaPositionIds) {
  // RoBERTa: mask = ids != pad; positions = cumsum(mask, 1) * mask + pad.
  const NdArray mask = array({2, 4}, {1, 1, 1, 0, 1, 0, 1, 1});
  expect_values(forward_ok("cumsum", {{"dim", std::int64_t{1}}}, {mask}), {1, 2, 3, 3, 1, 1, 2, 3});
  expect_values(forward_ok("cumsum", {{"dim", std::int64_t{0}}}, {mask}), {1, 1, 1, 0, 2, 1, 2, 1});
  EXPECT_FALSE(forward("cumsum", {{"dim", std::int64_t{2}}}, {mask}));
}

TEST(CumsumKernel, GradientsOnRandomShapes) {
  for (int trial = 0; trial < 6; ++trial) {
    const NdArray x = random_array({2, 3, 4}, rng);
    expect_gradients_match("cumsum", {{"dim", std::int64_t{trial % 3 - (trial >= 3 ? 3 : 0)}}}, {x}, {true}, 7 + trial);
  }
}

TEST(IndexSelectKernel, GathersAndScatterAddsRepeats) {
  const NdArray x = array({2, 3}, {0, 1, 2, 3, 4, 5});
  expect_values(forward_ok("index_select", {{"dim", std::int64_t{1}}}, {x, array({4}, {2, 0, 2, 1})}), {2, 0, 2, 1, 5, 3, 5, 4});
  expect_values(forward_ok("index_select", {{"dim", std::int64_t{0}}}, {x, array({1}, {1})}), {3, 4, 5});
  auto out_of_range = forward("index_select", {{"dim", std::int64_t{1}}}, {x, array({1}, {3})});
  ASSERT_FALSE(out_of_range);
  EXPECT_NE(out_of_range.error().message.find("outside [0, 3)"), std::string::npos) << out_of_range.error().message;
  for (int trial = 0; trial < 4; ++trial) {
    const NdArray index = random_indices({5}, 4, rng);  // repeats are likely: their gradients add
    expect_gradients_match("index_select", {{"dim", std::int64_t{trial % 2 == 0 ? 1 : -2}}},
                           {random_array({3, 4, 2}, rng), index}, {true, false}, 11 + trial);
  }
}

TEST(PadKernel, BorderValuesAndGradients) {
  const NdArray x = array({2, 2}, {1, 2, 3, 4});
  // (left 1, right 0) on the last dim, (top 0, bottom 1) on the first.
  expect_values(forward_ok("pad", {{"pads", List{1, 0, 0, 1}}, {"value", -1.0}}, {x}), {-1, 1, 2, -1, 3, 4, -1, -1, -1});
  EXPECT_EQ(forward_ok("pad", {{"pads", List{2, 1}}}, {x}).shape, (ir::Shape{2, 5}));
  EXPECT_FALSE(forward("pad", {{"pads", List{-1, 0}}}, {x}));
  expect_gradients_match("pad", {{"pads", List{1, 2, 0, 3}}}, {random_array({2, 3, 4}, rng)}, {true});
  expect_gradients_match("pad", {{"pads", List{0, 1, 1, 0, 2, 2}}, {"value", 3.0}}, {random_array({2, 3, 4}, rng)}, {true});
}

TEST(BilinearKernel, MatchesTorchAndItsGradients) {
  using Size = std::vector<std::int64_t>;
  const NdArray x = array({1, 1, 2, 2}, {1, 2, 3, 4});
  const std::vector<double> grid = {1, 1.5, 2, 2, 2.5, 3, 3, 3.5, 4};
  expect_values(forward_ok("upsample_bilinear2d", {{"output_size", Size{3, 3}}}, {x}), grid);
  expect_values(forward_ok("upsample_bilinear2d", {{"output_size", Size{3, 3}}, {"align_corners", true}}, {x}), grid);
  const NdArray wide = array({1, 1, 2, 4}, {0, 1, 2, 3, 4, 5, 6, 7});  // shrinks to [1, 3]
  expect_values(forward_ok("upsample_bilinear2d", {{"output_size", Size{1, 3}}}, {wide}), {13.0 / 6, 3.5, 29.0 / 6}, 1e-12);
  EXPECT_FALSE(forward("upsample_bilinear2d", {{"output_size", Size{3}}}, {x}));
  for (bool align : {false, true}) {
    expect_gradients_match("upsample_bilinear2d", {{"output_size", Size{5, 3}}, {"align_corners", align}},
                           {random_array({2, 2, 3, 4}, rng)}, {true});
  }
}

}  // namespace
}  // namespace loom::verify::testing
