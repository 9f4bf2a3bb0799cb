#include <gtest/gtest.h>

#include "loom/models/zoo.h"
#include "model_test_support.h"

namespace loom::models {
namespace {

using testing::parameter_count;

// 16 biased 3x3 convs of configuration E, then 25088 -> 4096 -> 4096 -> classes with biases.
std::int64_t vgg19_params(std::int64_t classes) {
  const std::vector<std::int64_t> widths = {64, 64, 128, 128, 256, 256, 256, 256, 512, 512, 512, 512, 512, 512, 512, 512};
  std::int64_t p = 0, in = 3;
  for (std::int64_t w : widths) {
    p += w * in * 9 + w;
    in = w;
  }
  return p + 25088 * 4096 + 4096 + 4096 * 4096 + 4096 + 4096 * classes + classes;
}

TEST(VggPresets, ImageNetAnchor) {
  EXPECT_EQ(vgg19_params(1000), 143'667'240);
  auto g = build_model("vgg19", {.batch = 2});
  ASSERT_TRUE(g) << g.error().to_string();
  EXPECT_EQ(parameter_count(*g), 143'667'240);
}

TEST(VggPresets, MillionClassClassifierDominates) {
  auto g = build_model("vgg19-4.2b", {.batch = 2});
  ASSERT_TRUE(g) << g.error().to_string();
  EXPECT_EQ(parameter_count(*g), vgg19_params(1'000'000));
  EXPECT_EQ(parameter_count(*g), 4'236'570'240);
  EXPECT_GT(4097.0 * 1e6 / static_cast<double>(parameter_count(*g)), 0.96);
  EXPECT_FALSE(build_model("vgg19", {.seq = 100}));
}

}  // namespace
}  // namespace loom::models
