#include <gtest/gtest.h>

#include "loom/ops/registry.h"
#include "op_test_util.h"

namespace loom::ops {
namespace {

using ir::DType;
using ir::Shape;

using testing::Attempt;

Attempt resolve(const std::string& type, std::vector<Shape> shapes, ir::Attrs attrs = {}) {
  return testing::attempt(type, std::move(shapes), std::move(attrs));
}

// Small Evoformer sizes: batch 1, s 4 sequences, r 6 residues, cm 16, cz 8, 2 heads of 4.
constexpr std::int64_t B = 1, S = 4, R = 6, CM = 16, CZ = 8, H = 2, D = 4;

std::vector<Shape> gated(std::int64_t c, std::int64_t bias_c) {
  std::vector<Shape> w{Shape{4, H, D, c}, Shape{H, D}};
  if (bias_c > 0) w.push_back(Shape{H, bias_c});
  w.push_back(Shape{c, H, D});
  w.push_back(Shape{c});
  return w;
}

std::vector<Shape> with(std::vector<Shape> head, const std::vector<Shape>& tail) {
  head.insert(head.end(), tail.begin(), tail.end());
  return head;
}

TEST(MsaRowAttention, SplitsSequencesNotResiduesAndCountsFlops) {
  auto r = resolve("msa_row_attention_with_pair_bias", with({Shape{B, S, R, CM}, Shape{B, R, R, CZ}}, gated(CM, CZ)));
  ASSERT_TRUE(r.op) << r.op.error().to_string();
  EXPECT_EQ(r.op->annotation_text, "b s r^ c^, b r^ t^ y^, 4 h+ d^ c^, h+ d^, h+ y^, e h+ d^, e -> b s r^ e");
  EXPECT_EQ(r.op->output_shapes[0], (Shape{B, S, R, CM}));
  const double tokens = B * S * R;
  const double expected = 4 * 2 * tokens * CM * H * D        // q, k, v, gate projections
                          + 2 * 2 * B * S * H * R * R * D      // scores and weighted values
                          + 5.0 * B * S * H * R * R            // softmax
                          + 5.0 * tokens * H * D               // gate
                          + 2 * tokens * H * D * CM + tokens * CM  // output projection
                          + 2.0 * B * R * R * CZ * H;          // pair bias
  EXPECT_DOUBLE_EQ(r.flops, expected);
}

TEST(MsaRowAttention, RejectsPairOfOtherLength) {
  auto r = resolve("msa_row_attention_with_pair_bias", with({Shape{B, S, R, CM}, Shape{B, R + 1, R + 1, CZ}}, gated(CM, CZ)));
  ASSERT_FALSE(r.op);
}

TEST(MsaColumnAttention, SplitsResidues) {
  auto r = resolve("msa_column_attention", with({Shape{B, S, R, CM}}, gated(CM, 0)));
  ASSERT_TRUE(r.op) << r.op.error().to_string();
  EXPECT_EQ(r.op->annotation_text, "b s^ r c^, 4 h+ d^ c^, h+ d^, e h+ d^, e -> b s^ r e");
}

TEST(TriangleAttention, ModesFreezeTheAttendedAxis) {
  const Shape z{B, R, R, CZ};
  auto start = resolve("triangle_attention", with({z, z}, gated(CZ, CZ)), {{"mode", std::string("starting")}});
  ASSERT_TRUE(start.op) << start.op.error().to_string();
  EXPECT_EQ(start.op->annotation_text,
            "b i j^ c^, b j^ k^ y^, 4 h+ d^ c^, h+ d^, h+ y^, e h+ d^, e -> b i j^ e");
  auto end = resolve("triangle_attention", with({z, z}, gated(CZ, CZ)), {{"mode", std::string("ending")}});
  ASSERT_TRUE(end.op);
  EXPECT_EQ(end.op->annotation.flag_of("i"), ir::DimFlag::frozen);
  EXPECT_EQ(end.op->annotation.flag_of("j"), ir::DimFlag::none);
  EXPECT_FALSE(resolve("triangle_attention", with({z, z}, gated(CZ, CZ)), {{"mode", std::string("middle")}}).op);
}

TEST(TriangleMultiplication, OutgoingAndIncomingAnnotationsAndFlops) {
  const Shape z{B, R, R, CZ};
  const std::vector<Shape> w{Shape{4, CZ, CZ}, Shape{4, CZ}, Shape{CZ}, Shape{CZ},
                             Shape{CZ, CZ},    Shape{CZ},    Shape{CZ, CZ}, Shape{CZ}};
  auto out = resolve("triangle_multiplication", with({z, z, z}, w), {{"mode", std::string("outgoing")}});
  ASSERT_TRUE(out.op) << out.op.error().to_string();
  EXPECT_EQ(out.op->annotation_text,
            "b i k^ c^, b j k^ c^, b i j c^, 4 ch^ c^, 4 ch^, ch^, ch^, e ch^, e, e c^, e -> b i j e");
  EXPECT_EQ(out.op->output_shapes[0], z);
  const double pairs = B * R * R;
  const double expected = 4 * (2 * pairs * CZ * CZ + pairs * CZ) + 2 * 5.0 * pairs * CZ + 2 * pairs * R * CZ +
                          8.0 * pairs * CZ + 2 * pairs * CZ * CZ + 2 * pairs * CZ * CZ + 5.0 * pairs * CZ;
  EXPECT_DOUBLE_EQ(out.flops, expected);
  auto in = resolve("triangle_multiplication", with({z, z, z}, w), {{"mode", std::string("incoming")}});
  ASSERT_TRUE(in.op);
  EXPECT_EQ(in.op->annotation_text.substr(0, 30), "b k^ i c^, b k^ j c^, b i j c^");
}

TEST(OuterProductMean, SequencesAreAReduction) {
  const Shape m{B, S, R, CM};
  auto r = resolve("outer_product_mean", {m, m, Shape{2, 3, CM}, Shape{2, 3}, Shape{CZ, 9}, Shape{CZ}});
  ASSERT_TRUE(r.op) << r.op.error().to_string();
  EXPECT_EQ(r.op->annotation_text, "b s+ i c^, b s+ j c^, 2 p^ c^, 2 p^, e (p^ q^), e -> b i j e");
  EXPECT_EQ(r.op->output_shapes[0], (Shape{B, R, R, CZ}));
  EXPECT_EQ(r.op->annotation.flag_of("s"), ir::DimFlag::reduce);
  EXPECT_FALSE(resolve("outer_product_mean", {m, m, Shape{2, 3, CM}, Shape{2, 3}, Shape{CZ, 8}, Shape{CZ}}).op);
}

TEST(RecycleDetach, StopsTheGradient) {
  const ir::OpDef* def = builtin_ops().find("recycle_detach");
  ASSERT_NE(def, nullptr);
  EXPECT_FALSE(def->backward.differentiable);
  auto r = resolve("recycle_detach", {Shape{2, 3}});
  ASSERT_TRUE(r.op);
  EXPECT_EQ(r.op->output_shapes[0], (Shape{2, 3}));
}

}  // namespace
}  // namespace loom::ops
