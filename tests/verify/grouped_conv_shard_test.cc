// A tensor-parallel shard of a grouped convolution (depthwise included) holds whole groups: the signature
// splits g, never a group's channels, while the `groups` attribute keeps counting the whole op's groups.
// The kernel must run such a shard as the conv of its own groups (RecurrentGemma, PvtV2 and Segformer
// failed under tp with "expected weight ... groups=N").
#include <gtest/gtest.h>

#include <random>

#include "gradient_check.h"
#include "loom/verify/ndarray_ops.h"

namespace loom::verify {
namespace {

using ir::Shape;
using testing::random_array;
using testing::run_forward;

// Channels [first, first + count) of an [n c h w] image or a [co cig kh kw] weight (dim 0 for weights).
NdArray channels(const NdArray& a, std::size_t dim, std::int64_t first, std::int64_t count) {
  std::vector<std::int64_t> start(a.shape.rank(), 0);
  start[dim] = first;
  ir::Shape size = a.shape;
  size.dims[dim] = count;
  return slice_box(a, start, size);
}

TEST(GroupedConvShard, EveryShardOfWholeGroupsIsTheSliceOfTheWholeConv) {
  const Kernel* conv = reference_kernels().find("conv2d");
  ASSERT_NE(conv, nullptr);
  std::mt19937_64 rng(5);
  // (channels, groups): depthwise (cig 1) and grouped (cig 2, 3); shards of 1, 2 or all groups.
  for (auto [c, groups] : {std::pair<std::int64_t, std::int64_t>{8, 8}, {8, 4}, {12, 4}, {6, 2}}) {
    const std::int64_t cig = c / groups;
    const NdArray x = random_array(Shape{2, c, 5, 4}, rng), w = random_array(Shape{c, cig, 3, 3}, rng);
    const NdArray b = random_array(Shape{c}, rng);
    const ir::Attrs attrs{{"groups", groups}, {"padding", std::vector<std::int64_t>{1}}};
    auto whole = run_forward(*conv, attrs, {x, w, b});
    ASSERT_TRUE(whole) << whole.error().to_string();
    for (std::int64_t parts : {std::int64_t{2}, groups}) {
      const std::int64_t per = c / parts;
      for (std::int64_t k = 0; k < parts; ++k) {
        auto shard = run_forward(*conv, attrs, {channels(x, 1, k * per, per), channels(w, 0, k * per, per),
                                                channels(b, 0, k * per, per)});
        ASSERT_TRUE(shard) << "c " << c << " groups " << groups << " part " << k << ": " << shard.error().to_string();
        const NdArray want = channels((*whole)[0], 1, k * per, per);
        ASSERT_EQ((*shard)[0].shape, want.shape);
        for (std::size_t i = 0; i < want.data.size(); ++i)
          ASSERT_NEAR((*shard)[0].data[i], want.data[i], 1e-12) << "c " << c << " groups " << groups << " part " << k;
      }
    }
  }
}

TEST(GroupedConvShard, AShardsGradientsMatchFiniteDifferences) {
  // The backward walks the same taps: half of a depthwise conv's channels, the attribute still the whole's.
  std::mt19937_64 rng(9);
  testing::expect_gradients_match("conv2d", {{"groups", std::int64_t{4}}},
                                  {random_array(Shape{1, 2, 3, 3}, rng), random_array(Shape{2, 1, 2, 2}, rng)},
                                  {true, true});
}

TEST(GroupedConvShard, ChannelsThatSplitAGroupStayAnError) {
  // 3 of 4 channels in groups of 2: not whole groups, so the weight does not fit.
  const Kernel* conv = reference_kernels().find("conv2d");
  ASSERT_NE(conv, nullptr);
  std::mt19937_64 rng(3);
  auto out = run_forward(*conv, {{"groups", std::int64_t{2}}},
                         {random_array(Shape{1, 3, 3, 3}, rng), random_array(Shape{3, 2, 1, 1}, rng)});
  EXPECT_FALSE(out);
}

}  // namespace
}  // namespace loom::verify
