#include <gtest/gtest.h>

#include "loom/models/zoo.h"
#include "model_test_support.h"

namespace loom::models {
namespace {

using testing::parameter_count;

// Closed form: patch embed (4x4 conv with bias, LN); per block 12C^2 + 13C (LN, qkv, proj, LN, MLP 4C)
// plus the relative position table (2*12-1)^2 x heads; patch merging LN(4C) + 4C x 2C; final LN, head.
std::int64_t swin_params(std::int64_t c, std::int64_t layers, std::int64_t heads) {
  const std::vector<std::int64_t> depths = {2, 2, layers - 6, 2};
  std::int64_t p = 3 * 16 * c + c + 2 * c;
  for (std::size_t i = 0; i < 4; ++i) {
    const std::int64_t ci = c << i, hi = heads << i;
    p += depths[i] * (12 * ci * ci + 13 * ci + 23 * 23 * hi);
    if (i < 3) p += 8 * ci + 8 * ci * ci;
  }
  const std::int64_t last = c << 3;
  return p + 2 * last + last * 1000 + 1000;
}

TEST(SwinPresets, ParameterCountsMatchTheClosedForm) {
  const std::vector<std::tuple<const char*, std::int64_t, std::int64_t, std::int64_t, double>> cases = {
      {"swin-1.8b", 512, 32, 16, 1.8e9},     {"swin-5b", 768, 40, 24, 5e9},       {"swin-10b", 1024, 48, 32, 10e9},
      {"swin-27b", 1536, 56, 32, 27e9},      {"swin-ss-6.6b", 768, 48, 24, 6.6e9}, {"swin-ss-13b", 1024, 56, 32, 13e9},
      {"swin-ss-30b", 1536, 64, 32, 30e9}};
  for (const auto& [name, c, layers, heads, nominal] : cases) {
    auto g = build_model(name, {.batch = 1, .seq = 384});
    ASSERT_TRUE(g) << name << ": " << g.error().to_string();
    const std::int64_t count = parameter_count(*g);
    EXPECT_EQ(count, swin_params(c, layers, heads)) << name;
    // nnScaler's presets land within 4 %; SuperScaler's 6.6B and 13B come out 11 % and 8 % lower.
    EXPECT_NEAR(static_cast<double>(count) / nominal, 1.0, 0.12) << name << " has " << count;
  }
}

TEST(SwinPresets, DefaultResolutionBuildsAndBadSidesAreRejected) {
  auto g = build_model("swin-1.8b", {.batch = 1, .layers = 7});
  ASSERT_TRUE(g) << g.error().to_string();
  EXPECT_EQ(g->tensor(g->inputs[0]).shape, (ir::Shape{1, 3, 1536, 1536}));
  auto bad = build_model("swin-1.8b", {.batch = 1, .seq = 400});
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("multiple of 384"), std::string::npos) << bad.error().message;
  EXPECT_FALSE(build_model("swin-1.8b", {.layers = 5}));
}

}  // namespace
}  // namespace loom::models
