#include <gtest/gtest.h>

#include "kernel_test_util.h"

namespace loom::verify::testing {
namespace {

std::mt19937_64 rng(23);

TEST(EmbeddingKernels, GradientsForIdsOfAnyRank) {
  expect_gradients_match("embedding", {}, {random_indices({2, 3}, 5, rng), random_array({5, 4}, rng)}, {false, true});
  expect_gradients_match("embedding", {}, {random_indices({4}, 3, rng), random_array({3, 2}, rng)}, {false, true});
  expect_gradients_match("embedding", {}, {array({}, {1}), random_array({3, 2}, rng)}, {false, true});
}

TEST(EmbeddingKernels, LookupAndPadding) {
  const NdArray weight = array({3, 2}, {0, 1, 10, 11, 20, 21});
  expect_values(forward_ok("embedding", {}, {array({2, 2}, {2, 0, 1, 2}), weight}), {20, 21, 0, 1, 10, 11, 20, 21});
  const Kernel* kernel = reference_kernels().find("embedding");
  const ir::Attrs attrs{{"padding_idx", std::int64_t{0}}};
  const KernelContext ctx{attrs, {}, {}, {}, {}};
  const std::vector<NdArray> inputs = {array({3}, {0, 1, 1}), weight};
  auto out = kernel->forward(ctx, inputs);
  ASSERT_TRUE(out);
  auto grads = kernel->backward(ctx, inputs, *out, std::vector<NdArray>{NdArray(ir::Shape{3, 2}, 1.0)});
  ASSERT_TRUE(grads);
  expect_values((*grads)[1], {0, 0, 2, 2, 0, 0});  // the padding row gets no gradient
}

// A vocabulary split: each shard answers the ids it holds; the shards' outputs and weight
// gradients are the full ones, summed and sliced.
TEST(EmbeddingKernels, VocabularyShardsSumToTheWholeLookup) {
  const NdArray ids = array({4}, {0, 3, 2, 1});
  const NdArray weight = random_array({4, 3}, rng);
  const NdArray whole = forward_ok("embedding", {}, {ids, weight});
  const Kernel* kernel = reference_kernels().find("embedding");
  const ir::Attrs attrs;
  NdArray summed(whole.shape);
  for (std::int64_t first : {0, 2}) {
    const std::vector<std::vector<std::int64_t>> offsets = {{0}, {first, 0}};
    const std::vector<ir::Shape> full = {ir::Shape{4}, ir::Shape{4, 3}};
    const KernelContext ctx{attrs, offsets, full, {}, {}};
    const NdArray shard = slice_box(weight, std::vector<std::int64_t>{first, 0}, ir::Shape{2, 3});
    auto out = kernel->forward(ctx, std::vector<NdArray>{ids, shard});
    ASSERT_TRUE(out);
    for (std::size_t i = 0; i < summed.data.size(); ++i) summed.data[i] += (*out)[0].data[i];
  }
  expect_values(summed, whole.data);
}

TEST(EmbeddingKernels, Errors) {
  EXPECT_FALSE(forward("embedding", {}, {array({1}, {3}), array({3, 2}, std::vector<double>(6))}));
  EXPECT_FALSE(forward("embedding", {}, {array({1}, {0.5}), array({3, 2}, std::vector<double>(6))}));
  EXPECT_FALSE(forward("embedding", {}, {array({1}, {0}), array({6}, std::vector<double>(6))}));
}

}  // namespace
}  // namespace loom::verify::testing
