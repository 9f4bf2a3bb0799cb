#include <gtest/gtest.h>

#include "op_test_util.h"

namespace loom::ops {
namespace {

using ir::Shape;
using testing::resolve;

TEST(Norm, LayerNormWithAndWithoutBias) {
  auto with_bias = resolve("layer_norm", {Shape{4, 128, 768}, Shape{768}, Shape{768}}, {{"eps", 1e-5}});
  ASSERT_TRUE(with_bias) << with_bias.error().to_string();
  EXPECT_EQ(with_bias->op.annotation_text, "* h^, h^, h^ -> * h^");
  EXPECT_EQ(with_bias->op.output_shapes[0], (Shape{4, 128, 768}));
  EXPECT_DOUBLE_EQ(with_bias->flops, 5.0 * 4 * 128 * 768);
  auto no_bias = resolve("layer_norm", {Shape{4, 768}, Shape{768}});
  ASSERT_TRUE(no_bias) << no_bias.error().to_string();
  EXPECT_EQ(no_bias->op.annotation_text, "* h^, h^ -> * h^");
}

TEST(Norm, LayerNormRejectsAMismatchedWeight) {
  auto r = resolve("layer_norm", {Shape{4, 768}, Shape{512}, Shape{768}});
  EXPECT_ERROR_HAS(r, "input 1 dim 0 ('h') has size 512, but 'h' is 768 from input 0 dim 1");
}

TEST(Norm, RmsNormCountsFourFlopsPerElement) {
  auto r = resolve("rms_norm", {Shape{2, 16, 4096}, Shape{4096}});
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->op.annotation_text, "* h^, h^ -> * h^");
  EXPECT_DOUBLE_EQ(r->flops, 4.0 * 2 * 16 * 4096);
  EXPECT_ERROR_HAS(resolve("rms_norm", {Shape{2, 16}, Shape{16}, Shape{16}}), "rms_norm takes two inputs (x, weight), got 3");
}

TEST(Norm, BatchNormFreezesBatchAndSpace) {
  auto r = resolve("batch_norm", {Shape{32, 64, 56, 56}, Shape{64}, Shape{64}}, {{"momentum", 0.1}});
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->op.annotation_text, "n^ c h^ w^, c, c -> n^ c h^ w^");
  EXPECT_EQ(r->op.output_shapes[0], (Shape{32, 64, 56, 56}));
  auto flat = resolve("batch_norm", {Shape{32, 64}, Shape{64}, Shape{64}});
  ASSERT_TRUE(flat) << flat.error().to_string();
  EXPECT_EQ(flat->op.annotation_text, "n^ c, c, c -> n^ c");
}

TEST(Norm, GroupNormNeedsGroupsDividingChannels) {
  auto r = resolve("group_norm", {Shape{8, 64, 16, 16}, Shape{64}, Shape{64}}, {{"groups", std::int64_t{32}}});
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->op.annotation_text, "n c^ h^ w^, c^, c^ -> n c^ h^ w^");
  EXPECT_ERROR_HAS(resolve("group_norm", {Shape{8, 64, 16, 16}, Shape{64}, Shape{64}}),
                   "op type 'group_norm' needs attribute 'groups'");
  EXPECT_ERROR_HAS(resolve("group_norm", {Shape{8, 60, 16, 16}, Shape{60}, Shape{60}}, {{"groups", std::int64_t{8}}}),
                   "group_norm: 60 channels cannot form 8 groups");
}

}  // namespace
}  // namespace loom::ops
