#include <gtest/gtest.h>

#include "loom/models/zoo.h"
#include "model_test_support.h"

namespace loom::models {
namespace {

using testing::parameter_count;

// Layer by layer: stem 7x7 conv + BN; bottlenecks (1x1, 3x3 widened, 1x1 to 4w, each + BN; a 1x1
// projection + BN on each stage's first block); fc with bias.
std::int64_t bottleneck_resnet_params(std::int64_t f, std::int64_t wf, std::vector<std::int64_t> blocks) {
  std::int64_t p = 3 * f * 49 + 2 * f, in = f;
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    const std::int64_t w = f << i;
    for (std::int64_t j = 0; j < blocks[i]; ++j) {
      p += in * w + 2 * w + w * w * wf * 9 + 2 * w * wf + w * wf * 4 * w + 2 * 4 * w;
      if (j == 0) p += in * 4 * w + 2 * 4 * w;
      in = 4 * w;
    }
  }
  return p + in * 1000 + 1000;
}

TEST(ResNetPresets, ClassicAnchors) {
  EXPECT_EQ(bottleneck_resnet_params(64, 1, {3, 4, 6, 3}), 25'557'032);  // torchvision resnet50
  auto g = build_model("resnet-50", {.batch = 2});
  ASSERT_TRUE(g) << g.error().to_string();
  EXPECT_EQ(parameter_count(*g), 25'557'032);
  auto g152 = build_model("resnet-152", {.batch = 2});
  ASSERT_TRUE(g152) << g152.error().to_string();
  EXPECT_EQ(parameter_count(*g152), 60'192'808);  // torchvision resnet152
}

TEST(ResNetPresets, WideResNetsMatchTheClosedForm) {
  // Rhino's names (1.3B/2.6B/6B/12B) overstate these counts by 23-50 %; see src/models/resnet.cc.
  const std::vector<std::tuple<const char*, std::int64_t, std::int64_t, std::vector<std::int64_t>>> cases = {
      {"wrn-1.3b", 320, 2, {3, 4, 6, 3}}, {"wrn-2.6b", 448, 2, {3, 4, 6, 3}},
      {"wrn-6b", 640, 2, {3, 4, 6, 3}},   {"wrn-12b", 320, 12, {3, 4, 23, 3}}};
  for (const auto& [name, f, wf, blocks] : cases) {
    auto g = build_model(name, {.batch = 1, .seq = 64});
    ASSERT_TRUE(g) << name << ": " << g.error().to_string();
    EXPECT_EQ(parameter_count(*g), bottleneck_resnet_params(f, wf, blocks)) << name;
  }
  auto g = build_model("wrn-1.3b", {.batch = 1, .seq = 64});
  ASSERT_TRUE(g);
  EXPECT_EQ(parameter_count(*g), 1'005'407'400);
}

TEST(ResNetPresets, StemIsTheFirstConvolution) {
  auto g = build_model("resnet-50", {.batch = 2});
  ASSERT_TRUE(g);
  const ir::Op& stem = g->ops.front();
  EXPECT_EQ(stem.type, "conv2d");
  EXPECT_EQ(g->tensor(stem.outputs[0]).shape, (ir::Shape{2, 64, 112, 112}));
  EXPECT_FALSE(build_model("resnet-50", {.layers = 3}));
}

}  // namespace
}  // namespace loom::models
