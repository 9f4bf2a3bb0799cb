#include <gtest/gtest.h>

#include "loom/ops/registry.h"

namespace loom::ops {
namespace {

using ir::DType;
using ir::Shape;

Expected<ir::ResolvedOp> resolve(const std::string& type, std::vector<Shape> shapes, ir::Attrs attrs = {}) {
  const ir::OpDef* def = builtin_ops().find(type);
  EXPECT_NE(def, nullptr) << type;
  std::vector<DType> dtypes(shapes.size(), DType::bf16);
  return ir::resolve_op(*def, attrs, shapes, dtypes);
}

TEST(WindowPartition, FoldsWindowsIntoBatchKeepingBatchAndChannelsSplittable) {
  auto r = resolve("window_partition", {Shape{2, 24, 36, 96}}, {{"window_size", std::int64_t{12}}});
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->annotation_text, "b (nh^ wh^) (nw^ ww^) c -> (b nh^ nw^) (wh^ ww^) c");
  EXPECT_EQ(r->output_shapes[0], (Shape{2 * 2 * 3, 144, 96}));
  EXPECT_EQ(r->annotation.flag_of("b"), ir::DimFlag::none);
  EXPECT_EQ(r->annotation.flag_of("c"), ir::DimFlag::none);
}

TEST(WindowPartition, RejectsWindowNotDividingTheMap) {
  auto r = resolve("window_partition", {Shape{1, 30, 24, 8}}, {{"window_size", std::int64_t{7}}});
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("window size 7 does not divide the 30x24 feature map"), std::string::npos)
      << r.error().message;
}

TEST(WindowReverse, InvertsPartition) {
  auto r = resolve("window_reverse", {Shape{12, 144, 96}},
                   {{"window_size", std::int64_t{12}}, {"height", std::int64_t{24}}, {"width", std::int64_t{36}}});
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->output_shapes[0], (Shape{2, 24, 36, 96}));
  EXPECT_FALSE(resolve("window_reverse", {Shape{5, 144, 96}},
                       {{"window_size", std::int64_t{12}}, {"height", std::int64_t{24}}, {"width", std::int64_t{36}}}));
}

TEST(PatchMerging, HalvesResolutionAndQuadruplesChannels) {
  auto r = resolve("patch_merging", {Shape{2, 8, 6, 32}});
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->annotation_text, "b (h 2) (w 2) c -> b h w (c 4)");
  EXPECT_EQ(r->output_shapes[0], (Shape{2, 4, 3, 128}));
  EXPECT_FALSE(resolve("patch_merging", {Shape{2, 7, 6, 32}}));
}

TEST(CyclicShift, FreezesSpatialDims) {
  auto r = resolve("cyclic_shift", {Shape{2, 8, 8, 4}}, {{"shift", std::int64_t{-3}}});
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->annotation_text, "b h^ w^ c -> b h^ w^ c");
  EXPECT_EQ(r->output_shapes[0], (Shape{2, 8, 8, 4}));
}

TEST(RelativePositionBias, GathersTableIntoPerHeadBias) {
  auto r = resolve("relative_position_bias", {Shape{23 * 23, 16}}, {{"window_size", std::int64_t{12}}});
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->output_shapes[0], (Shape{16, 144, 144}));
  EXPECT_FALSE(resolve("relative_position_bias", {Shape{100, 16}}, {{"window_size", std::int64_t{12}}}));
}

}  // namespace
}  // namespace loom::ops
