#include <gtest/gtest.h>

#include "kernel_test_util.h"

namespace loom::verify::testing {
namespace {

std::mt19937_64 rng(29);

using List = std::vector<std::int64_t>;

TEST(ShapeKernels, Gradients) {
  const NdArray x = random_array({2, 3, 4}, rng);
  expect_gradients_match("reshape", {{"shape", List{6, -1}}}, {x}, {true});
  expect_gradients_match("view", {{"shape", List{2, 12}}}, {x}, {true});
  expect_gradients_match("flatten", {{"start_dim", std::int64_t{1}}}, {x}, {true});
  expect_gradients_match("unsqueeze", {{"dim", std::int64_t{-1}}}, {x}, {true});
  expect_gradients_match("squeeze", {}, {random_array({2, 1, 3}, rng)}, {true});
  expect_gradients_match("transpose", {{"dim0", std::int64_t{0}}, {"dim1", std::int64_t{2}}}, {x}, {true});
  expect_gradients_match("permute", {{"dims", List{1, 2, 0}}}, {x}, {true});
  expect_gradients_match("split", {{"sizes", List{1, 3}}, {"dim", std::int64_t{2}}}, {x}, {true});
  expect_gradients_match("chunk", {{"chunks", std::int64_t{2}}, {"dim", std::int64_t{1}}}, {x}, {true});
  expect_gradients_match("concat", {{"dim", std::int64_t{1}}}, {x, random_array({2, 1, 4}, rng)}, {true, true});
  expect_gradients_match("slice", {{"dim", std::int64_t{2}}, {"start", std::int64_t{1}}, {"step", std::int64_t{2}}}, {x}, {true});
  expect_gradients_match("expand", {{"shape", List{2, 2, -1}}}, {random_array({2, 1, 3}, rng)}, {true});
  expect_gradients_match("contiguous", {}, {x}, {true});
  expect_gradients_match("identity", {}, {x}, {true});
}

TEST(ShapeKernels, ForwardValues) {
  const NdArray x = array({2, 3}, {0, 1, 2, 3, 4, 5});
  EXPECT_EQ(forward_ok("reshape", {{"shape", List{3, -1}}}, {x}).shape, (ir::Shape{3, 2}));
  expect_values(forward_ok("transpose", {{"dim0", std::int64_t{0}}, {"dim1", std::int64_t{1}}}, {x}), {0, 3, 1, 4, 2, 5});
  expect_values(forward_ok("slice", {{"dim", std::int64_t{1}}, {"start", std::int64_t{-2}}}, {x}), {1, 2, 4, 5});
  expect_values(forward_ok("concat", {{"dim", std::int64_t{1}}}, {x, array({2, 1}, {9, 9})}), {0, 1, 2, 9, 3, 4, 5, 9});
  expect_values(forward_ok("expand", {{"shape", List{2, 2}}}, {array({2, 1}, {7, 8})}), {7, 7, 8, 8});
  auto parts = forward("chunk", {{"chunks", std::int64_t{2}}, {"dim", std::int64_t{1}}}, {x});
  ASSERT_TRUE(parts);
  ASSERT_EQ(parts->size(), 2u);
  expect_values((*parts)[0], {0, 1, 3, 4});
  expect_values((*parts)[1], {2, 5});
}

// A shard of a reshape: [8, 6] -> [8, 2, 3] split along the first dim keeps the other dims.
TEST(ShapeKernels, ReshapeOfAShard) {
  const Kernel* kernel = reference_kernels().find("reshape");
  const ir::Attrs attrs{{"shape", List{8, 2, 3}}};
  const std::vector<std::vector<std::int64_t>> offsets = {{4, 0}};
  const std::vector<ir::Shape> full = {ir::Shape{8, 6}};
  const KernelContext ctx{attrs, offsets, full, {}, {}};
  auto out = kernel->forward(ctx, std::vector<NdArray>{NdArray(ir::Shape{4, 6})});
  ASSERT_TRUE(out);
  EXPECT_EQ((*out)[0].shape, (ir::Shape{4, 2, 3}));
  // A merge: [4, 3, 2] -> [12, 2] with the first dim split in two.
  const ir::Attrs merge{{"shape", List{12, 2}}};
  const std::vector<ir::Shape> full_merge = {ir::Shape{4, 3, 2}};
  const KernelContext merge_ctx{merge, offsets, full_merge, {}, {}};
  auto merged = kernel->forward(merge_ctx, std::vector<NdArray>{NdArray(ir::Shape{2, 3, 2})});
  ASSERT_TRUE(merged);
  EXPECT_EQ((*merged)[0].shape, (ir::Shape{6, 2}));
}

TEST(ShapeKernels, Errors) {
  const NdArray x = array({2, 3}, {0, 1, 2, 3, 4, 5});
  EXPECT_FALSE(forward("reshape", {{"shape", List{4, -1}}}, {x}));
  EXPECT_FALSE(forward("squeeze", {{"dim", std::int64_t{0}}}, {x}));
  EXPECT_FALSE(forward("split", {{"sizes", List{1, 1}}, {"dim", std::int64_t{1}}}, {x}));
  EXPECT_FALSE(forward("permute", {{"dims", List{0, 0}}}, {x}));
  EXPECT_FALSE(forward("expand", {{"shape", List{3, 3}}}, {x}));
  EXPECT_FALSE(forward("slice", {{"dim", std::int64_t{1}}, {"start", std::int64_t{5}}}, {x}));
  EXPECT_FALSE(forward("concat", {}, {x, array({3}, {1, 2, 3})}));
}

}  // namespace
}  // namespace loom::verify::testing
