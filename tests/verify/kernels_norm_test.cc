#include <gtest/gtest.h>

#include "kernel_test_util.h"

namespace loom::verify::testing {
namespace {

std::mt19937_64 rng(19);

TEST(NormKernels, Gradients) {
  expect_gradients_match("layer_norm", {}, {random_array({2, 3, 4}, rng), random_array({4}, rng), random_array({4}, rng)},
                         {true, true, true});
  expect_gradients_match("layer_norm", {{"eps", 1e-3}}, {random_array({3, 4}, rng), random_array({4}, rng)}, {true, true});
  expect_gradients_match("rms_norm", {}, {random_array({3, 4}, rng), random_array({4}, rng)}, {true, true});
  expect_gradients_match("batch_norm", {}, {random_array({3, 2, 2, 2}, rng), random_array({2}, rng), random_array({2}, rng)},
                         {true, true, true});
  expect_gradients_match("batch_norm", {}, {random_array({4, 3}, rng), random_array({3}, rng), random_array({3}, rng)},
                         {true, true, true});
  expect_gradients_match("group_norm", {{"groups", std::int64_t{2}}},
                         {random_array({2, 4, 3}, rng), random_array({4}, rng), random_array({4}, rng)}, {true, true, true});
}

TEST(NormKernels, ForwardValues) {
  const NdArray x = array({4}, {1, 2, 3, 4}), ones(ir::Shape{4}, 1.0), zeros(ir::Shape{4}, 0.0);
  expect_values(forward_ok("layer_norm", {}, {x, ones, zeros}),
                {-1.3416354199689269, -0.447211806656309, 0.447211806656309, 1.3416354199689269});
  expect_values(forward_ok("layer_norm", {}, {x, array({4}, {2, 2, 2, 2}), array({4}, {1, 1, 1, 1})}),
                {1 - 2 * 1.3416354199689269, 1 - 2 * 0.447211806656309, 1 + 2 * 0.447211806656309, 1 + 2 * 1.3416354199689269});
  expect_values(forward_ok("rms_norm", {}, {x, ones}), {0.3651481282381064, 0.7302962564762128, 1.0954443847143192, 1.4605925129524255});
  // batch_norm over [n=2, c=1]: the batch statistics of {1, 3} are mean 2, variance 1.
  expect_values(forward_ok("batch_norm", {{"eps", 0.0}}, {array({2, 1}, {1, 3}), array({1}, {1}), array({1}, {0})}), {-1, 1});
  // group_norm with one channel per group equals instance norm.
  expect_values(forward_ok("group_norm", {{"groups", std::int64_t{2}}, {"eps", 0.0}},
                           {array({1, 2, 2}, {1, 3, 5, 9}), array({2}, {1, 1}), array({2}, {0, 0})}),
                {-1, 1, -1, 1});
}

TEST(NormKernels, Errors) {
  EXPECT_FALSE(forward("layer_norm", {}, {array({2, 3}, std::vector<double>(6)), array({2}, {1, 1})}));
  EXPECT_FALSE(forward("group_norm", {{"groups", std::int64_t{3}}},
                       {array({1, 2}, {1, 2}), array({2}, {1, 1}), array({2}, {0, 0})}));
  EXPECT_FALSE(forward("batch_norm", {}, {array({2}, {1, 2}), array({1}, {1}), array({1}, {0})}));
}

}  // namespace
}  // namespace loom::verify::testing
