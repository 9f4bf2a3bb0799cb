#include "loom/comm/layout.h"

#include <gtest/gtest.h>

#include "loom/cluster/presets.h"

namespace loom::comm {
namespace {

Layout parse(std::string_view text) {
  Expected<Layout> l = parse_layout(text);
  EXPECT_TRUE(l.has_value()) << text << ": " << l.error().to_string();
  return l.value_or(Layout{});
}

TEST(ParseLayout, RoundTrip) {
  for (std::string_view text : {"R(1)V(8)D(1)@0-7", "R(1)V(1)D(8)@8-15", "R(2)V(1)D(2,2)@0,2,4,6,8-11",
                                "R(1)V(2)D(1,2)@3,1,2,0", "R(4)V(1)D(1)@0-3", "R(1)V(1)D()@5"}) {
    EXPECT_EQ(to_string(parse(text)), text);
  }
}

TEST(ParseLayout, DeviceRangesAndLists) {
  const Layout l = parse("R(1)V(1)D(8)@0,2,4,6,9-12");
  EXPECT_EQ(l.devices, (std::vector<int>{0, 2, 4, 6, 9, 10, 11, 12}));
  EXPECT_EQ(devices_to_string({0, 1, 2, 5, 7, 8}), "0-2,5,7,8");
}

TEST(ParseLayout, Errors) {
  EXPECT_NE(parse_layout("R(1)V(8)D(1)@0-3").error().message.find("R·V·D = 8 but 4 devices"), std::string::npos);
  EXPECT_NE(parse_layout("R(1)V(8)D(1)").error().message.find("missing '@'"), std::string::npos);
  EXPECT_NE(parse_layout("R(1)X(8)D(1)@0-7").error().message.find("expected 'V('"), std::string::npos);
  EXPECT_NE(parse_layout("R(1)V(0)D(1)@0-7").error().message.find("at least 1"), std::string::npos);
  EXPECT_NE(parse_layout("R(2)V(1)D(1)@1,1").error().message.find("listed twice"), std::string::npos);
  EXPECT_NE(parse_layout("R(a)V(1)D(1)@0").error().message.find("bad R factor 'a'"), std::string::npos);
  EXPECT_NE(parse_layout("R(1)V(1)D(2)@3-1").error().message.find("bad device range"), std::string::npos);
}

TEST(ParseLayout, HugeFactorsDoNotWrapToTheDeviceCount) {
  // 274177 · 67280421310721 = 2^64 + 1: unchecked, the product wrapped to 1 and matched the one device.
  Expected<Layout> l = parse_layout("R(274177)V(67280421310721)D(1)@0");
  ASSERT_FALSE(l.has_value());
  EXPECT_NE(l.error().message.find("layout R(274177)V(67280421310721)D(1)@0: R·V·D overflows"), std::string::npos)
      << l.error().message;
  // Four factors of 2^16 give 2^64, which wraps to 0: also no match for an empty-looking layout.
  Layout wraps{.r = 65536, .v = 65536, .d = {65536, 65536}, .devices = {}};
  EXPECT_FALSE(validate(wraps).has_value());
  EXPECT_NE(parse_layout("R(1)V(3)D(1)@0,1").error().message.find("R·V·D = 3 but 2 devices"), std::string::npos);
}

TEST(ParseLayout, DeviceIdsBeyondIntAreErrorsNotTruncated) {
  // static_cast<int> turned 4294967296 into device 0 and -4294967296 into 0 as well.
  for (std::string_view text : {"R(1)V(1)D(1)@4294967296", "R(1)V(1)D(2)@2147483647-2147483648"}) {
    Expected<Layout> l = parse_layout(text);
    ASSERT_FALSE(l.has_value()) << text;
    EXPECT_NE(l.error().message.find("is out of range"), std::string::npos) << l.error().message;
  }
  EXPECT_NE(parse_layout("R(1)V(1)D(1)@4294967296").error().message.find("device 4294967296"), std::string::npos);
  EXPECT_NE(parse_layout("R(1)V(1)D(1)@-4294967296").error().message.find("negative device -4294967296"),
            std::string::npos);
  EXPECT_EQ(parse("R(1)V(1)D(1)@2147483647").devices, std::vector<int>{2147483647});
}

TEST(Validate, DeviceOutsideTheClusterNamesDeviceAndClusterSize) {
  const TensorSpec t{ir::Shape{8}, ir::DType::f32};
  const cluster::Cluster c = *cluster::make_cluster("v100x8");
  Expected<void> v = validate(parse("R(1)V(1)D(1)@2147483647"), t, c);
  ASSERT_FALSE(v.has_value());
  EXPECT_NE(v.error().message.find("device 2147483647 is not in cluster 'v100x8' (8 devices, 0-7)"), std::string::npos)
      << v.error().message;
}

TEST(Validate, TensorRankAndDivisibility) {
  const TensorSpec t{ir::Shape{1000}, ir::DType::f32};
  EXPECT_TRUE(validate(parse("R(1)V(1)D(8)@0-7"), t).has_value());
  Expected<void> bad = validate(parse("R(1)V(1)D(16)@0-15"), t);
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.error().message.find("not divisible by D factor 16"), std::string::npos);
  EXPECT_NE(validate(parse("R(1)V(1)D(2,2)@0-3"), t).error().message.find("rank 1"), std::string::npos);
  const cluster::Cluster c = *cluster::make_cluster("v100x8");
  EXPECT_NE(validate(parse("R(1)V(1)D(8)@8-15"), t, c).error().message.find("device 8 is not in cluster"),
            std::string::npos);
}

TEST(Layout, CoordOfFollowsCanonicalOrderROutermost) {
  const Layout l = parse("R(2)V(2)D(1,2)@0-7");
  EXPECT_EQ(l.coord_of(0), (GridCoord{0, 0, 0, 0}));
  EXPECT_EQ(l.coord_of(1), (GridCoord{0, 0, 0, 1}));
  EXPECT_EQ(l.coord_of(2), (GridCoord{0, 1, 0, 0}));
  EXPECT_EQ(l.coord_of(4), (GridCoord{1, 0, 0, 0}));
  EXPECT_EQ(l.coord_of(7), (GridCoord{1, 1, 0, 1}));
  for (std::size_t p = 0; p < 8; ++p) EXPECT_EQ(l.position_of(l.coord_of(p)), p);
  EXPECT_EQ(l.device_at({1, 0, 0, 1}), 5);
}

TEST(Layout, BytesPerDeviceAndChunkBox) {
  const TensorSpec t{ir::Shape{8, 6}, ir::DType::bf16};
  const Layout l = parse("R(1)V(2)D(2,3)@0-11");
  EXPECT_EQ(bytes_per_device(l, t), 8 * 6 * 2 / 6);
  const Box b = chunk_box(l, t.shape, {0, 1, 1, 2});
  EXPECT_EQ(b.begin, (std::vector<std::int64_t>{4, 4}));
  EXPECT_EQ(b.end, (std::vector<std::int64_t>{8, 6}));
  EXPECT_EQ(b.volume(), 8);
}

TEST(Canonical, ReplicaAndValueLabelsCarryNoMeaning) {
  // Chunk 0 on {3, 1}, chunk 1 on {2, 0}: the same placement however the replicas are numbered.
  EXPECT_EQ(to_string(canonical(parse("R(2)V(1)D(2)@3,2,1,0"))), "R(2)V(1)D(2)@1,0,3,2");
  EXPECT_TRUE(same_placement(parse("R(1)V(2)D(1)@0,1"), parse("R(1)V(2)D(1)@1,0")));
  EXPECT_FALSE(same_placement(parse("R(1)V(1)D(2)@0,1"), parse("R(1)V(1)D(2)@1,0")));  // chunks swap
}

}  // namespace
}  // namespace loom::comm
