#include <gtest/gtest.h>

#include "kernel_test_util.h"

namespace loom::verify::testing {
namespace {

std::mt19937_64 rng(11);

TEST(ElementwiseKernels, BinaryGradientsWithBroadcasting) {
  for (const char* type : {"add", "sub", "mul", "div"}) {
    SCOPED_TRACE(type);
    const bool divides = std::string(type) == "div";
    const double lo = divides ? 0.5 : -1.0;
    expect_gradients_match(type, {}, {random_array({2, 3}, rng), random_array({2, 3}, rng, lo, 1.5)}, {true, true});
    expect_gradients_match(type, {}, {random_array({2, 3}, rng), random_array({3}, rng, lo, 1.5)}, {true, true});
    expect_gradients_match(type, {}, {random_array({2, 1, 3}, rng), random_array({4, 1}, rng, lo, 1.5)}, {true, true});
    expect_gradients_match(type, {}, {random_array({}, rng), random_array({2, 2}, rng, lo, 1.5)}, {true, true});
  }
}

TEST(ElementwiseKernels, UnaryGradients) {
  const ir::Shape shape{2, 3};
  for (const char* type : {"neg", "exp", "tanh", "sigmoid", "abs", "square"})
    expect_gradients_match(type, {}, {random_array(shape, rng)}, {true});
  for (const char* type : {"log", "sqrt", "rsqrt"}) expect_gradients_match(type, {}, {random_array(shape, rng, 0.5, 2)}, {true});
  expect_gradients_match("reciprocal", {}, {random_array(shape, rng, 0.5, 2)}, {true});
  expect_gradients_match("acos", {}, {random_array(shape, rng, -0.8, 0.8)}, {true});
  expect_gradients_match("remainder", {{"divisor", 0.75}}, {array({4}, {-1.3, -0.2, 0.4, 2.1})}, {true});
  expect_gradients_match("scale", {{"factor", 2.5}}, {random_array(shape, rng)}, {true});
  expect_gradients_match("pow", {{"exponent", 3.0}}, {random_array(shape, rng)}, {true});
  expect_gradients_match("pow", {{"exponent", 0.5}}, {random_array(shape, rng, 0.5, 2)}, {true});
  expect_gradients_match("clamp", {{"min", -0.5}, {"max", 0.5}}, {array({4}, {-0.9, -0.2, 0.3, 0.8})}, {true});
  expect_gradients_match("clamp", {{"min", 0.0}}, {array({3}, {-0.9, 0.2, 3.0})}, {true});
  expect_gradients_match("cast", {{"dtype", std::string("bf16")}}, {random_array(shape, rng)}, {true});
}

TEST(ElementwiseKernels, WhereAndMaskedFill) {
  const NdArray cond = array({2, 1}, {1, 0});
  expect_gradients_match("where", {}, {cond, random_array({2, 3}, rng), random_array({3}, rng)}, {false, true, true});
  const NdArray mask = array({3}, {0, 1, 0});
  // A moderate fill value: a huge one would drown the finite differences in rounding.
  expect_gradients_match("masked_fill", {{"value", -3.0}}, {random_array({2, 3}, rng), mask}, {true, false});
  expect_values(forward_ok("where", {}, {cond, array({2, 2}, {1, 2, 3, 4}), array({}, {9})}), {1, 2, 9, 9});
  expect_values(forward_ok("masked_fill", {{"value", -5.0}}, {array({2, 3}, {1, 2, 3, 4, 5, 6}), mask}), {1, -5, 3, 4, -5, 6});
}

TEST(ElementwiseKernels, ForwardValues) {
  expect_values(forward_ok("add", {}, {array({2, 2}, {1, 2, 3, 4}), array({2}, {10, 20})}), {11, 22, 13, 24});
  expect_values(forward_ok("div", {}, {array({2}, {1, 3}), array({}, {2})}), {0.5, 1.5});
  expect_values(forward_ok("sigmoid", {}, {array({1}, {0})}), {0.5});
  expect_values(forward_ok("reciprocal", {}, {array({2}, {4, -0.5})}), {0.25, -2});
  expect_values(forward_ok("acos", {}, {array({3}, {1, 0, -1})}), {0, std::acos(0.0), std::acos(-1.0)});
  // Python's %: the divisor's sign (torch.remainder), not C's fmod.
  expect_values(forward_ok("remainder", {{"divisor", 5.0}}, {array({4}, {7, -7, 10, -1})}), {2, 3, 0, 4});
  expect_values(forward_ok("remainder", {{"divisor", -5.0}}, {array({2}, {7, -7})}), {-3, -2});
  expect_values(forward_ok("clamp", {{"max", 1.0}}, {array({2}, {-3, 3})}), {-3, 1});
  expect_values(forward_ok("cast", {{"dtype", std::string("i64")}}, {array({3}, {1.7, -1.7, 2})}), {1, -1, 2});
  expect_values(forward_ok("cast", {{"dtype", std::string("bool")}}, {array({2}, {0, -2})}), {0, 1});
}

TEST(ElementwiseKernels, ErrorsNameTheOp) {
  auto wrong_arity = forward("add", {}, {array({2}, {1, 2})});
  ASSERT_FALSE(wrong_arity);
  EXPECT_NE(wrong_arity.error().message.find("add"), std::string::npos);
  auto mismatch = forward("mul", {}, {array({2}, {1, 2}), array({3}, {1, 2, 3})});
  ASSERT_FALSE(mismatch);
  EXPECT_NE(mismatch.error().message.find("mul"), std::string::npos);
  auto missing_attr = forward("scale", {}, {array({2}, {1, 2})});
  ASSERT_FALSE(missing_attr);
  EXPECT_NE(missing_attr.error().message.find("scale"), std::string::npos);
}

}  // namespace
}  // namespace loom::verify::testing
