// Reference kernel of topk: exact values and positions (largest and smallest, along any dim, ties to
// the lower position), gradients against finite differences on random rows, and bad k refused.
#include <gtest/gtest.h>

#include "kernel_test_util.h"

namespace loom::verify::testing {
namespace {

std::mt19937_64 rng(43);

TEST(TopkKernel, ValuesAndPositionsInRankOrder) {
  const NdArray x = array({2, 4}, {0.5, 3, -1, 3, 2, 0, 7, 1});
  auto largest = forward("topk", {{"k", std::int64_t{2}}}, {x});
  ASSERT_TRUE(largest) << largest.error().to_string();
  expect_values((*largest)[0], {3, 3, 7, 2});
  expect_values((*largest)[1], {1, 3, 2, 0});  // the tie at 3 ranks position 1 first
  auto smallest = forward("topk", {{"k", std::int64_t{1}}, {"dim", std::int64_t{0}}, {"largest", false}}, {x});
  ASSERT_TRUE(smallest) << smallest.error().to_string();
  expect_values((*smallest)[0], {0.5, 0, -1, 1});
  expect_values((*smallest)[1], {0, 1, 0, 1});
  auto too_many = forward("topk", {{"k", std::int64_t{5}}}, {x});
  ASSERT_FALSE(too_many);
  EXPECT_NE(too_many.error().message.find("outside [0, 4]"), std::string::npos) << too_many.error().message;
}

TEST(TopkKernel, GradientsReachThePickedEntriesOnly) {
  for (int trial = 0; trial < 6; ++trial) {
    const ir::Attrs attrs = {{"k", std::int64_t{1 + trial % 3}}, {"dim", std::int64_t{trial % 2 == 0 ? -1 : 1}},
                             {"largest", trial < 3}};
    expect_gradients_match("topk", attrs, {random_array({2, 4, 4}, rng)}, {true}, 17 + trial);
  }
}

}  // namespace
}  // namespace loom::verify::testing
