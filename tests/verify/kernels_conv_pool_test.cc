#include <gtest/gtest.h>

#include "gradient_check.h"
#include "loom/ops/registry.h"

namespace loom::verify {
namespace {

using ir::Shape;
using testing::expect_gradients_match;
using testing::random_array;
using testing::run_forward;
using Ints = std::vector<std::int64_t>;

NdArray forward1(std::string_view type, const ir::Attrs& attrs, const std::vector<NdArray>& inputs) {
  const Kernel* kernel = reference_kernels().find(type);
  EXPECT_NE(kernel, nullptr) << type;
  auto out = run_forward(*kernel, attrs, inputs);
  EXPECT_TRUE(out) << out.error().to_string();
  return out ? (*out)[0] : NdArray{};
}

void expect_values(const NdArray& actual, const Shape& shape, const std::vector<double>& values) {
  ASSERT_EQ(actual.shape, shape);
  for (std::size_t i = 0; i < values.size(); ++i) EXPECT_NEAR(actual.data[i], values[i], 1e-12) << "element " << i;
}

NdArray iota(const Shape& shape) {
  NdArray a(shape);
  for (std::size_t i = 0; i < a.data.size(); ++i) a.data[i] = static_cast<double>(i);
  return a;
}

double dot(const NdArray& a, const NdArray& b) {
  double sum = 0;
  for (std::size_t i = 0; i < a.data.size(); ++i) sum += a.data[i] * b.data[i];
  return sum;
}

TEST(ConvPoolKernels, Conv2dOfAKnownImage) {
  // x = 0..8 as 3x3, kernel [[1, 0], [0, -1]]: x[i][j] - x[i+1][j+1] = -4, plus the bias 1.
  const NdArray x = iota(Shape{1, 1, 3, 3}), w(Shape{1, 1, 2, 2}, {1, 0, 0, -1}), bias(Shape{1}, {1});
  expect_values(forward1("conv2d", {}, {x, w, bias}), Shape{1, 1, 2, 2}, {-3, -3, -3, -3});
  // All-ones 3x3 kernel, padding 1: counts of in-bounds taps; stride 2 keeps the corners.
  const NdArray ones(Shape{1, 1, 3, 3}, 1.0);
  expect_values(forward1("conv2d", {{"padding", Ints{1}}}, {ones, ones}), Shape{1, 1, 3, 3}, {4, 6, 4, 6, 9, 6, 4, 6, 4});
  expect_values(forward1("conv2d", {{"padding", Ints{1}}, {"stride", Ints{2}}}, {ones, ones}), Shape{1, 1, 2, 2},
                {4, 4, 4, 4});
  // Dilation 2 on 0..8 with a 2x2 ones kernel reads the four corners: 0 + 2 + 6 + 8.
  expect_values(forward1("conv2d", {{"dilation", Ints{2}}}, {x, NdArray(Shape{1, 1, 2, 2}, 1.0)}), Shape{1, 1, 1, 1}, {16});
}

TEST(ConvPoolKernels, GroupedConvolutionKeepsGroupsApart) {
  // Two groups of one channel: output channel g reads only input channel g.
  const NdArray x(Shape{1, 2, 1, 1}, {3, 5}), w(Shape{2, 1, 1, 1}, {2, 10});
  expect_values(forward1("conv2d", {{"groups", std::int64_t{2}}}, {x, w}), Shape{1, 2, 1, 1}, {6, 50});
}

TEST(ConvPoolKernels, ConvTransposeIsTheAdjointOfConv) {
  // <conv2d(x, w), y> = <x, conv_transpose2d(y, w)> for the same stride, padding and dilation.
  std::mt19937_64 rng(3);
  const NdArray x = random_array(Shape{2, 3, 5, 6}, rng), w = random_array(Shape{4, 3, 3, 2}, rng);
  const ir::Attrs attrs = {{"stride", Ints{2, 1}}, {"padding", Ints{1}}, {"dilation", Ints{1, 2}}};
  const NdArray y = forward1("conv2d", attrs, {x, w});
  ASSERT_EQ(y.shape, (Shape{2, 4, 3, 6}));
  const NdArray g = random_array(y.shape, rng);
  ir::Attrs transposed = attrs;
  transposed["output_padding"] = Ints{0, 0};
  const NdArray back = forward1("conv_transpose2d", transposed, {g, w});
  ASSERT_EQ(back.shape, (Shape{2, 3, 5, 6}));
  EXPECT_NEAR(dot(y, g), dot(x, back), 1e-10);
}

TEST(ConvPoolKernels, ConvTransposeOfAKnownImage) {
  // Stride 2 with a 1x1 kernel spreads pixels apart; output_padding adds the last row and column.
  const NdArray x(Shape{1, 1, 2, 2}, {1, 2, 3, 4}), w(Shape{1, 1, 1, 1}, {2}), bias(Shape{1}, {1});
  expect_values(forward1("conv_transpose2d", {{"stride", Ints{2}}, {"output_padding", Ints{1}}}, {x, w, bias}),
                Shape{1, 1, 4, 4}, {3, 1, 5, 1, 1, 1, 1, 1, 7, 1, 9, 1, 1, 1, 1, 1});
}

struct GradientCase {
  std::string name, type;
  ir::Attrs attrs;
  std::vector<Shape> inputs;
};
void PrintTo(const GradientCase& c, std::ostream* os) { *os << c.name; }

class ConvPoolGradient : public ::testing::TestWithParam<GradientCase> {};

TEST_P(ConvPoolGradient, MatchesFiniteDifferences) {
  const GradientCase& c = GetParam();
  std::mt19937_64 rng(17);
  std::vector<NdArray> inputs;
  for (const Shape& s : c.inputs) inputs.push_back(random_array(s, rng));
  expect_gradients_match(c.type, c.attrs, inputs, std::vector<bool>(inputs.size(), true));
}

INSTANTIATE_TEST_SUITE_P(
    ConvPool, ConvPoolGradient,
    ::testing::Values(
        GradientCase{"conv2d_bias", "conv2d", {}, {Shape{2, 2, 4, 3}, Shape{3, 2, 2, 2}, Shape{3}}},
        GradientCase{"conv2d_stride_pad_dilation", "conv2d",
                     {{"stride", Ints{2}}, {"padding", Ints{1, 2}}, {"dilation", Ints{2, 1}}},
                     {Shape{1, 2, 5, 4}, Shape{2, 2, 2, 3}}},
        GradientCase{"conv2d_groups", "conv2d", {{"groups", std::int64_t{2}}, {"padding", Ints{1}}},
                     {Shape{1, 4, 3, 3}, Shape{6, 2, 2, 2}, Shape{6}}},
        GradientCase{"conv_transpose2d_bias", "conv_transpose2d", {}, {Shape{1, 2, 3, 3}, Shape{2, 3, 2, 2}, Shape{3}}},
        GradientCase{"conv_transpose2d_stride_pad", "conv_transpose2d",
                     {{"stride", Ints{2}}, {"padding", Ints{1}}, {"output_padding", Ints{1, 0}}, {"dilation", Ints{1, 2}}},
                     {Shape{2, 2, 3, 2}, Shape{2, 1, 3, 2}}},
        GradientCase{"max_pool2d", "max_pool2d", {{"kernel", Ints{2}}}, {Shape{1, 2, 4, 5}}},
        GradientCase{"max_pool2d_stride_pad", "max_pool2d", {{"kernel", Ints{3, 2}}, {"stride", Ints{1}}, {"padding", Ints{1}}},
                     {Shape{2, 1, 4, 4}}},
        GradientCase{"avg_pool2d", "avg_pool2d", {{"kernel", Ints{2}}}, {Shape{1, 2, 4, 5}}},
        GradientCase{"avg_pool2d_stride_pad", "avg_pool2d", {{"kernel", Ints{3}}, {"stride", Ints{2}}, {"padding", Ints{1}}},
                     {Shape{1, 1, 5, 4}}},
        GradientCase{"adaptive_avg_pool2d", "adaptive_avg_pool2d", {{"output_size", Ints{2, 3}}}, {Shape{1, 2, 5, 4}}},
        GradientCase{"upsample_nearest2d", "upsample_nearest2d", {{"scale", std::int64_t{2}}}, {Shape{1, 2, 2, 3}}}),
    [](const ::testing::TestParamInfo<GradientCase>& info) { return info.param.name; });

TEST(ConvPoolKernels, PoolingOfKnownImages) {
  expect_values(forward1("max_pool2d", {{"kernel", Ints{2}}}, {iota(Shape{1, 1, 4, 4})}), Shape{1, 1, 2, 2},
                {5, 7, 13, 15});
  // count_include_pad (torch's default): padded zeros count in the divisor.
  expect_values(forward1("avg_pool2d", {{"kernel", Ints{2}}, {"stride", Ints{1}}, {"padding", Ints{1}}},
                         {NdArray(Shape{1, 1, 2, 2}, 1.0)}),
                Shape{1, 1, 3, 3}, {0.25, 0.5, 0.25, 0.5, 1, 0.5, 0.25, 0.5, 0.25});
  // Adaptive windows [0, 2) and [1, 3) overlap on a 3x3 input.
  expect_values(forward1("adaptive_avg_pool2d", {{"output_size", Ints{2}}}, {iota(Shape{1, 1, 3, 3})}), Shape{1, 1, 2, 2},
                {2, 3, 5, 6});
  expect_values(forward1("upsample_nearest2d", {{"scale", std::int64_t{2}}}, {NdArray(Shape{1, 1, 1, 2}, {1, 2})}),
                Shape{1, 1, 2, 4}, {1, 1, 2, 2, 1, 1, 2, 2});
}

TEST(ConvPoolKernels, BadInputsAreErrorsNamingTheOp) {
  const std::vector<std::pair<std::string, std::vector<NdArray>>> cases = {
      {"conv2d", {NdArray(Shape{1, 2, 3, 3})}},
      {"conv2d", {NdArray(Shape{1, 2, 3, 3}), NdArray(Shape{1, 3, 2, 2})}},
      {"conv2d", {NdArray(Shape{1, 2, 3, 3}), NdArray(Shape{1, 2, 4, 4})}},
      {"conv_transpose2d", {NdArray(Shape{2, 3}), NdArray(Shape{1, 2, 4, 4})}},
      {"max_pool2d", {NdArray(Shape{1, 1, 3})}},
      {"avg_pool2d", {NdArray(Shape{1, 1, 3, 3}), NdArray(Shape{1, 1, 3, 3})}},
      {"upsample_nearest2d", {NdArray(Shape{2, 2})}},
  };
  for (const auto& [type, inputs] : cases) {
    ir::Attrs attrs;
    if (type.find("pool") != std::string::npos) attrs["kernel"] = Ints{2};
    if (type == "upsample_nearest2d") attrs["scale"] = std::int64_t{2};
    auto out = run_forward(*reference_kernels().find(type), attrs, inputs);
    ASSERT_FALSE(out) << type;
    EXPECT_NE(out.error().message.find(type), std::string::npos) << out.error().message;
  }
}

}  // namespace
}  // namespace loom::verify
