#include <gtest/gtest.h>

#include "loom/ops/reshape_signature.h"
#include "op_test_util.h"

namespace loom::ops {
namespace {

using ir::Shape;
using testing::resolve;

ir::AttrValue ints(std::vector<std::int64_t> values) { return values; }

struct ReshapeCase {
  Shape from;
  std::vector<std::int64_t> target;
  std::string annotation;
  Shape output;
};

class Reshape : public ::testing::TestWithParam<ReshapeCase> {};

TEST_P(Reshape, GroupsDimsIntoSplittableRuns) {
  const ReshapeCase& c = GetParam();
  auto r = resolve("reshape", {c.from}, {{"shape", ints(c.target)}});
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->op.annotation_text, c.annotation);
  EXPECT_EQ(r->op.output_shapes, std::vector<Shape>{c.output});
  EXPECT_DOUBLE_EQ(r->flops, 0);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, Reshape,
    ::testing::Values(ReshapeCase{Shape{8, 128, 768}, {8, 128, 12, 64}, "a b (c d) -> a b c d", Shape{8, 128, 12, 64}},
                      ReshapeCase{Shape{8, 128, 12, 64}, {8, 128, 768}, "a b c d -> a b (c d)", Shape{8, 128, 768}},
                      ReshapeCase{Shape{8, 128, 768}, {8, -1}, "a b c -> a (b c)", Shape{8, 98304}},
                      ReshapeCase{Shape{24}, {2, 3, 4}, "(a b c) -> a b c", Shape{2, 3, 4}},
                      ReshapeCase{Shape{8, 1, 768}, {8, 768}, "a 1 b -> a b", Shape{8, 768}},
                      ReshapeCase{Shape{6, 4}, {4, 6}, "a^ b^ -> c^ d^", Shape{4, 6}},
                      ReshapeCase{Shape{6, 4, 5}, {4, 6, 5}, "a^ b^ e -> c^ d^ e", Shape{4, 6, 5}},
                      ReshapeCase{Shape{1}, {}, "1 -> ", Shape{}},
                      // A batch of one stays an identifier where both sides lead with it (the planner
                      // follows the batch through); other size-1 dims stay numbers.
                      ReshapeCase{Shape{1, 512, 4096}, {1, 512, 32, 128}, "a b (c d) -> a b c d", Shape{1, 512, 32, 128}},
                      ReshapeCase{Shape{1, 1, 6}, {1, 6}, "a 1 b -> a b", Shape{1, 6}},
                      ReshapeCase{Shape{1, 6}, {6}, "1 a -> a", Shape{6}}));

TEST(ReshapeSignature, GivesAllButTheOutermostFactor) {
  auto s = reshape_signature(Shape{8, 768}, Shape{8, 2, 6, 64}, "reshape");
  ASSERT_TRUE(s) << s.error().to_string();
  EXPECT_EQ(s->annotation, "a (b c d) -> a b c d");
  EXPECT_EQ(s->sizes, (ir::SizeMap{{"c", 6}, {"d", 64}}));
}

TEST(Shape, ReshapeErrorsNameBothShapes) {
  EXPECT_ERROR_HAS(resolve("reshape", {Shape{8, 128, 768}}, {{"shape", ints({8, 128, 12, 60})}}),
                   "reshape: cannot reshape [8, 128, 768] (786432 elements) to [8, 128, 12, 60] (737280 elements)");
  EXPECT_ERROR_HAS(resolve("view", {Shape{8, 128}}, {{"shape", ints({-1, -1})}}),
                   "view: target shape [-1, -1] has more than one -1");
  EXPECT_ERROR_HAS(resolve("view", {Shape{8, 10}}, {{"shape", ints({-1, 3})}}),
                   "view: cannot reshape [8, 10] (80 elements) to [-1, 3]: 80 is not a multiple of 3");
}

TEST(Shape, FlattenSqueezeUnsqueezeAreReshapes) {
  auto flat = resolve("flatten", {Shape{2, 3, 4, 5}}, {{"start_dim", std::int64_t{1}}, {"end_dim", std::int64_t{2}}});
  ASSERT_TRUE(flat) << flat.error().to_string();
  EXPECT_EQ(flat->op.annotation_text, "a b c d -> a (b c) d");
  EXPECT_EQ(flat->op.output_shapes[0], (Shape{2, 12, 5}));
  auto unsq = resolve("unsqueeze", {Shape{4, 8}}, {{"dim", std::int64_t{-1}}});
  ASSERT_TRUE(unsq) << unsq.error().to_string();
  EXPECT_EQ(unsq->op.annotation_text, "a b -> a b 1");
  EXPECT_EQ(unsq->op.output_shapes[0], (Shape{4, 8, 1}));
  auto sq = resolve("squeeze", {Shape{4, 1, 8}});
  ASSERT_TRUE(sq) << sq.error().to_string();
  EXPECT_EQ(sq->op.annotation_text, "a 1 b -> a b");
  EXPECT_ERROR_HAS(resolve("squeeze", {Shape{4, 1, 8}}, {{"dim", std::int64_t{0}}}),
                   "squeeze: dim 0 of [4, 1, 8] has size 4, not 1");
}

TEST(Shape, TransposeAndPermuteMoveIdentifiers) {
  auto t = resolve("transpose", {Shape{2, 3, 4}}, {{"dim0", std::int64_t{1}}, {"dim1", std::int64_t{-1}}});
  ASSERT_TRUE(t) << t.error().to_string();
  EXPECT_EQ(t->op.annotation_text, "d0 d1 d2 -> d0 d2 d1");
  EXPECT_EQ(t->op.output_shapes[0], (Shape{2, 4, 3}));
  auto p = resolve("permute", {Shape{2, 12, 128, 64}}, {{"dims", ints({0, 2, 1, 3})}});
  ASSERT_TRUE(p) << p.error().to_string();
  EXPECT_EQ(p->op.annotation_text, "d0 d1 d2 d3 -> d0 d2 d1 d3");
  EXPECT_EQ(p->op.output_shapes[0], (Shape{2, 128, 12, 64}));
  EXPECT_ERROR_HAS(resolve("permute", {Shape{2, 3}}, {{"dims", ints({0, 0})}}), "permute: dim 0 appears twice in 'dims'");
  EXPECT_ERROR_HAS(resolve("permute", {Shape{2, 3}}, {{"dims", ints({0})}}),
                   "permute: 'dims' lists 1 dims for a tensor of rank 2");
  EXPECT_ERROR_HAS(resolve("transpose", {Shape{2, 3}}, {{"dim0", std::int64_t{0}}, {"dim1", std::int64_t{2}}}),
                   "transpose: dim 2 is out of range for a tensor of rank 2");
}

TEST(Shape, SplitAndChunkFreezeTheCutDim) {
  auto s = resolve("split", {Shape{4, 10, 6}}, {{"sizes", ints({3, 7})}, {"dim", std::int64_t{1}}});
  ASSERT_TRUE(s) << s.error().to_string();
  EXPECT_EQ(s->op.annotation_text, "d0 d1^ d2 -> d0 p0^ d2, d0 p1^ d2");
  EXPECT_EQ(s->op.output_shapes, (std::vector<Shape>{Shape{4, 3, 6}, Shape{4, 7, 6}}));
  EXPECT_ERROR_HAS(resolve("split", {Shape{4, 10}}, {{"sizes", ints({3, 6})}, {"dim", std::int64_t{1}}}),
                   "split: parts add up to 9, but dim 1 of [4, 10] has size 10");
  auto c = resolve("chunk", {Shape{10, 4}}, {{"chunks", std::int64_t{3}}});
  ASSERT_TRUE(c) << c.error().to_string();
  EXPECT_EQ(c->op.output_shapes, (std::vector<Shape>{Shape{4, 4}, Shape{4, 4}, Shape{2, 4}}));
  auto qkv = resolve("chunk", {Shape{2, 16, 2304}}, {{"chunks", std::int64_t{3}}, {"dim", std::int64_t{-1}}});
  ASSERT_TRUE(qkv) << qkv.error().to_string();
  EXPECT_EQ(qkv->op.annotation_text, "d0 d1 d2^ -> d0 d1 p0^, d0 d1 p1^, d0 d1 p2^");
  EXPECT_EQ(qkv->op.output_shapes[2], (Shape{2, 16, 768}));
}

TEST(Shape, ConcatSumsTheJoinedDim) {
  auto r = resolve("concat", {Shape{2, 3}, Shape{2, 5}, Shape{2, 1}}, {{"dim", std::int64_t{1}}});
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->op.annotation_text, "d0 p0^, d0 p1^, d0 p2^ -> d0 o^");
  EXPECT_EQ(r->op.output_shapes[0], (Shape{2, 9}));
  EXPECT_ERROR_HAS(resolve("concat", {Shape{2, 3}, Shape{3, 3}}, {{"dim", std::int64_t{1}}}),
                   "('d0') has size 3, but 'd0' is 2");
  EXPECT_ERROR_HAS(resolve("concat", {Shape{2, 3}, Shape{2, 3, 1}}), "concat: input 1 has shape [2, 3, 1], but input 0 has rank 2");
}

TEST(Shape, SliceFollowsPythonIndexing) {
  auto r = resolve("slice", {Shape{10, 4}},
                   {{"dim", std::int64_t{0}}, {"start", std::int64_t{2}}, {"end", std::int64_t{-1}}, {"step", std::int64_t{3}}});
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->op.annotation_text, "d0^ d1 -> o^ d1");
  EXPECT_EQ(r->op.output_shapes[0], (Shape{3, 4}));
  EXPECT_ERROR_HAS(resolve("slice", {Shape{10}}, {{"dim", std::int64_t{0}}, {"start", std::int64_t{5}}, {"end", std::int64_t{5}}}),
                   "slice: [5:5:1] of dim 0 (size 10) is empty");
}

TEST(Shape, ExpandGrowsSizeOneAndLeadingDims) {
  auto r = resolve("expand", {Shape{1, 8}}, {{"shape", ints({3, 4, -1})}});
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->op.annotation_text, "1 d2 -> d0 d1 d2");
  EXPECT_EQ(r->op.output_shapes[0], (Shape{3, 4, 8}));
  EXPECT_ERROR_HAS(resolve("expand", {Shape{3, 8}}, {{"shape", ints({4, 8})}}),
                   "expand: dim 0 of [3, 8] has size 3 and cannot become 4");
}

TEST(Shape, CopiesKeepTheShape) {
  for (const char* type : {"contiguous", "identity"}) {
    auto r = resolve(type, {Shape{2, 3}});
    ASSERT_TRUE(r) << r.error().to_string();
    EXPECT_EQ(r->op.output_shapes[0], (Shape{2, 3}));
  }
}

}  // namespace
}  // namespace loom::ops
