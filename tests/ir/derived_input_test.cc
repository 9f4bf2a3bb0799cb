#include "loom/ir/derived_input.h"

#include <gtest/gtest.h>

namespace loom::ir {
namespace {

TEST(DerivedInput, CountsTheLabelsInsideTheWindowThatAreNotIgnored) {
  const DerivedInput all{.from = TensorId(0), .ignore_index = -100, .trim = {}};
  const DerivedInput shifted{.from = TensorId(0), .ignore_index = -100, .trim = {{0, 0}, {1, 0}}};
  const std::vector<double> labels = {-100, 1, 2, 3, 6, -100, 4, 5};  // [2, 4]
  EXPECT_EQ(counted_tokens(all, Shape{2, 4}, labels), 6.0);
  EXPECT_EQ(counted_tokens(shifted, Shape{2, 4}, labels), 5.0);  // each row's first label (-100, 6) dropped
  const DerivedInput middle{.from = TensorId(0), .ignore_index = 2, .trim = {{1, 0}, {1, 1}}};
  EXPECT_EQ(counted_tokens(middle, Shape{2, 4}, labels), 2.0);  // row 1, columns 1-2: -100 and 4 (ignore_index is 2)
}

}  // namespace
}  // namespace loom::ir
