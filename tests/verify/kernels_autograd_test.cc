#include <gtest/gtest.h>

#include <set>

#include "kernel_test_util.h"
#include "loom/ops/registry.h"

namespace loom::verify::testing {
namespace {

std::mt19937_64 rng(41);

TEST(AutogradKernels, AccumulateAndFillLike) {
  expect_values(forward_ok("accumulate", {}, {array({2}, {1, 2}), array({2}, {10, 20}), array({2}, {100, 200})}), {111, 222});
  expect_gradients_match("accumulate", {}, {random_array({2, 2}, rng), random_array({2, 2}, rng)}, {true, true});
  expect_values(forward_ok("fill_like", {}, {array({2}, {5, 6})}), {1, 1});
  expect_values(forward_ok("fill_like", {{"value", 0.5}}, {array({}, {5})}), {0.5});
  EXPECT_FALSE(forward("accumulate", {}, {array({2}, {1, 2}), array({1}, {1})}));
}

}  // namespace
}  // namespace loom::verify::testing
