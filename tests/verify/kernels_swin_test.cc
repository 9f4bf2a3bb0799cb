#include <gtest/gtest.h>

#include "gradient_check.h"
#include "loom/ops/registry.h"

namespace loom::verify {
namespace {

using ir::Shape;
using testing::expect_gradients_match;
using testing::random_array;
using testing::run_forward;

NdArray forward1(std::string_view type, const ir::Attrs& attrs, const NdArray& input) {
  const Kernel* kernel = reference_kernels().find(type);
  EXPECT_NE(kernel, nullptr) << type;
  auto out = run_forward(*kernel, attrs, {input});
  EXPECT_TRUE(out) << out.error().to_string();
  return out ? (*out)[0] : NdArray{};
}

NdArray iota(const Shape& shape) {
  NdArray a(shape);
  for (std::size_t i = 0; i < a.data.size(); ++i) a.data[i] = static_cast<double>(i);
  return a;
}

TEST(SwinKernels, WindowPartitionOrdersWindowsAndPixelsRowMajor) {
  const NdArray windows = forward1("window_partition", {{"window_size", std::int64_t{2}}}, iota(Shape{1, 4, 4, 1}));
  ASSERT_EQ(windows.shape, (Shape{4, 4, 1}));
  EXPECT_EQ(windows.data, (std::vector<double>{0, 1, 4, 5, 2, 3, 6, 7, 8, 9, 12, 13, 10, 11, 14, 15}));
}

TEST(SwinKernels, WindowReverseUndoesWindowPartition) {
  std::mt19937_64 rng(1);
  const NdArray x = random_array(Shape{2, 4, 6, 3}, rng);
  const NdArray windows = forward1("window_partition", {{"window_size", std::int64_t{2}}}, x);
  ASSERT_EQ(windows.shape, (Shape{12, 4, 3}));
  const ir::Attrs attrs = {{"window_size", std::int64_t{2}}, {"height", std::int64_t{4}}, {"width", std::int64_t{6}}};
  EXPECT_EQ(forward1("window_reverse", attrs, windows), x);
}

TEST(SwinKernels, CyclicShiftIsTorchRollAndInvertsWithTheOppositeShift) {
  EXPECT_EQ(forward1("cyclic_shift", {{"shift", std::int64_t{1}}}, iota(Shape{1, 3, 1, 1})).data,
            (std::vector<double>{2, 0, 1}));
  EXPECT_EQ(forward1("cyclic_shift", {{"shift", std::int64_t{-1}}}, iota(Shape{1, 1, 3, 1})).data,
            (std::vector<double>{1, 2, 0}));
  std::mt19937_64 rng(2);
  const NdArray x = random_array(Shape{2, 4, 5, 2}, rng);
  const NdArray shifted = forward1("cyclic_shift", {{"shift", std::int64_t{-2}}}, x);
  EXPECT_NE(shifted, x);
  EXPECT_EQ(forward1("cyclic_shift", {{"shift", std::int64_t{2}}}, shifted), x);
}

TEST(SwinKernels, PatchMergingPutsChannelsFirstThenSwinOffsets) {
  // 2x2 map, 2 channels: pixel (y, x) channel c holds 10 (2y + x) + c. Offsets in Swin's order
  // (0,0), (1,0), (0,1), (1,1) as (dy, dx), inside each channel.
  NdArray x(Shape{1, 2, 2, 2});
  for (std::size_t i = 0; i < 8; ++i) x.data[i] = static_cast<double>(10 * (i / 2) + i % 2);
  const NdArray merged = forward1("patch_merging", {}, x);
  ASSERT_EQ(merged.shape, (Shape{1, 1, 1, 8}));
  EXPECT_EQ(merged.data, (std::vector<double>{0, 20, 10, 30, 1, 21, 11, 31}));
}

TEST(SwinKernels, RelativePositionBiasIndexesByCoordinateDifference) {
  // ws = 2: table rows (dy + 1) * 3 + (dx + 1); two heads hold row and 100 + row.
  NdArray table(Shape{9, 2});
  for (std::size_t row = 0; row < 9; ++row) {
    table.data[row * 2] = static_cast<double>(row);
    table.data[row * 2 + 1] = 100.0 + static_cast<double>(row);
  }
  const NdArray bias = forward1("relative_position_bias", {{"window_size", std::int64_t{2}}}, table);
  ASSERT_EQ(bias.shape, (Shape{2, 4, 4}));
  EXPECT_EQ(bias.data[0 * 4 + 0], 4);    // same token
  EXPECT_EQ(bias.data[0 * 4 + 3], 0);    // (0,0) vs (1,1): dy = dx = -1
  EXPECT_EQ(bias.data[3 * 4 + 0], 8);    // (1,1) vs (0,0)
  EXPECT_EQ(bias.data[1 * 4 + 2], 2);    // (0,1) vs (1,0): dy = -1, dx = 1
  EXPECT_EQ(bias.data[16 + 2 * 4 + 1], 106);  // head 1, (1,0) vs (0,1)
}

struct GradientCase {
  std::string name, type;
  ir::Attrs attrs;
  Shape input;
};
void PrintTo(const GradientCase& c, std::ostream* os) { *os << c.name; }

class SwinGradient : public ::testing::TestWithParam<GradientCase> {};

TEST_P(SwinGradient, MatchesFiniteDifferences) {
  const GradientCase& c = GetParam();
  std::mt19937_64 rng(9);
  expect_gradients_match(c.type, c.attrs, {random_array(c.input, rng)}, {true});
}

INSTANTIATE_TEST_SUITE_P(
    Swin, SwinGradient,
    ::testing::Values(
        GradientCase{"window_partition", "window_partition", {{"window_size", std::int64_t{2}}}, Shape{1, 4, 2, 2}},
        GradientCase{"window_reverse", "window_reverse",
                     {{"window_size", std::int64_t{2}}, {"height", std::int64_t{2}}, {"width", std::int64_t{4}}},
                     Shape{4, 4, 1}},
        GradientCase{"patch_merging", "patch_merging", {}, Shape{1, 2, 4, 2}},
        GradientCase{"cyclic_shift", "cyclic_shift", {{"shift", std::int64_t{-1}}}, Shape{1, 3, 2, 2}},
        GradientCase{"relative_position_bias", "relative_position_bias", {{"window_size", std::int64_t{2}}},
                     Shape{9, 2}}),
    [](const ::testing::TestParamInfo<GradientCase>& info) { return info.param.name; });

TEST(SwinKernels, BadInputsAreErrorsNamingTheOp) {
  const std::vector<std::tuple<std::string, ir::Attrs, NdArray>> cases = {
      {"window_partition", {{"window_size", std::int64_t{3}}}, NdArray(Shape{1, 4, 4, 1})},
      {"window_partition", {}, NdArray(Shape{1, 4, 4, 1})},
      {"window_reverse", {{"window_size", std::int64_t{2}}, {"height", std::int64_t{4}}, {"width", std::int64_t{4}}},
       NdArray(Shape{3, 4, 1})},
      {"patch_merging", {}, NdArray(Shape{1, 3, 4, 1})},
      {"cyclic_shift", {{"shift", std::int64_t{1}}}, NdArray(Shape{4, 4})},
      {"relative_position_bias", {{"window_size", std::int64_t{2}}}, NdArray(Shape{8, 2})},
  };
  for (const auto& [type, attrs, input] : cases) {
    auto out = run_forward(*reference_kernels().find(type), attrs, {input});
    ASSERT_FALSE(out) << type;
    EXPECT_NE(out.error().message.find(type), std::string::npos) << out.error().message;
  }
}

}  // namespace
}  // namespace loom::verify
