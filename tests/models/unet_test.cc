#include <gtest/gtest.h>

#include "loom/models/zoo.h"
#include "model_test_support.h"

namespace loom::models {
namespace {

using testing::parameter_count;

// Double conv (two bias-free 3x3 conv + BN) per level, 2x2 transposed conv with bias going up, 1x1 head.
std::int64_t unet_params() {
  const auto double_conv = [](std::int64_t in, std::int64_t out) { return in * out * 9 + 2 * out + out * out * 9 + 2 * out; };
  std::int64_t p = double_conv(3, 64);
  for (std::int64_t w = 128; w <= 1024; w *= 2) p += double_conv(w / 2, w);
  for (std::int64_t w = 512; w >= 64; w /= 2) p += 2 * w * w * 4 + w + double_conv(2 * w, w);
  return p + 64 * 3 + 3;
}

TEST(UNetPreset, BuildsWithTheClassicCount) {
  auto g = build_model("unet-33m", {.batch = 2, .seq = 64});
  ASSERT_TRUE(g) << g.error().to_string();
  EXPECT_EQ(parameter_count(*g), unet_params());
  EXPECT_EQ(parameter_count(*g), 31'037'763);  // Rhino calls it 33M: 6 % fewer
  EXPECT_FALSE(build_model("unet-33m", {.seq = 100}));
}

}  // namespace
}  // namespace loom::models
