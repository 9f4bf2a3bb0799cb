#include <gtest/gtest.h>

#include "kernel_test_util.h"

namespace loom::verify::testing {
namespace {

std::mt19937_64 rng(31);

using List = std::vector<std::int64_t>;

TEST(ReduceKernels, Gradients) {
  const NdArray x = random_array({2, 3, 4}, rng);
  for (const char* type : {"sum", "mean", "max", "amax"}) {
    SCOPED_TRACE(type);
    expect_gradients_match(type, {}, {x}, {true});
    expect_gradients_match(type, {{"dims", List{1}}}, {x}, {true});
    expect_gradients_match(type, {{"dims", List{0, -1}}, {"keepdim", true}}, {x}, {true});
  }
}

TEST(ReduceKernels, ForwardValues) {
  const NdArray x = array({2, 3}, {1, 5, 3, 4, 2, 6});
  expect_values(forward_ok("sum", {}, {x}), {21});
  expect_values(forward_ok("sum", {{"dims", List{0}}}, {x}), {5, 7, 9});
  expect_values(forward_ok("mean", {{"dims", List{1}}, {"keepdim", true}}, {x}), {3, 4});
  EXPECT_EQ(forward_ok("mean", {{"dims", List{1}}, {"keepdim", true}}, {x}).shape, (ir::Shape{2, 1}));
  expect_values(forward_ok("max", {{"dims", List{1}}}, {x}), {5, 6});
  expect_values(forward_ok("amax", {}, {x}), {6});
  expect_values(forward_ok("argmax", {{"dim", std::int64_t{1}}}, {x}), {1, 2});
  expect_values(forward_ok("argmax", {}, {x}), {5});
  // Ties share the gradient (torch.amax).
  const Kernel* amax = reference_kernels().find("amax");
  const ir::Attrs attrs;
  const KernelContext ctx{attrs, {}, {}, {}, {}};
  const std::vector<NdArray> tied = {array({3}, {2, 1, 2})};
  auto out = amax->forward(ctx, tied);
  ASSERT_TRUE(out);
  auto grads = amax->backward(ctx, tied, *out, std::vector<NdArray>{array({}, {1})});
  ASSERT_TRUE(grads);
  expect_values((*grads)[0], {0.5, 0, 0.5});
}

// A mean over a split dim divides by the full count: the shards' partial means add up.
TEST(ReduceKernels, MeanOfShardsAddsUp) {
  const NdArray x = random_array({4, 2}, rng);
  const ir::Attrs attrs{{"dims", List{0}}};
  const NdArray whole = forward_ok("mean", attrs, {x});
  const Kernel* mean = reference_kernels().find("mean");
  NdArray summed(whole.shape);
  for (std::int64_t first : {0, 2}) {
    const std::vector<std::vector<std::int64_t>> offsets = {{first, 0}};
    const std::vector<ir::Shape> full = {ir::Shape{4, 2}};
    const KernelContext ctx{attrs, offsets, full, {}, {}};
    auto part = mean->forward(ctx, std::vector<NdArray>{slice_box(x, offsets[0], ir::Shape{2, 2})});
    ASSERT_TRUE(part);
    for (std::size_t i = 0; i < summed.data.size(); ++i) summed.data[i] += (*part)[0].data[i];
  }
  expect_values(summed, whole.data);
}

TEST(ReduceKernels, Errors) {
  const NdArray x = array({2}, {1, 2});
  EXPECT_FALSE(forward("sum", {{"dims", List{1}}}, {x}));
  EXPECT_FALSE(forward("mean", {{"dims", List{0, 0}}}, {x}));
  EXPECT_FALSE(forward("argmax", {{"dim", std::int64_t{2}}}, {x}));
  EXPECT_FALSE(static_cast<bool>(reference_kernels().find("argmax")->backward));
}

}  // namespace
}  // namespace loom::verify::testing
