#include <gtest/gtest.h>

#include "kernel_test_util.h"

namespace loom::verify::testing {
namespace {

std::mt19937_64 rng(17);

TEST(LinalgKernels, Gradients) {
  expect_gradients_match("matmul", {}, {random_array({2, 3}, rng), random_array({3, 4}, rng)}, {true, true});
  expect_gradients_match("matmul", {}, {random_array({2, 2, 3}, rng), random_array({3, 4}, rng)}, {true, true});
  expect_gradients_match("matmul", {}, {random_array({2, 2, 3}, rng), random_array({2, 3, 2}, rng)}, {true, true});
  expect_gradients_match("bmm", {}, {random_array({2, 2, 3}, rng), random_array({2, 3, 2}, rng)}, {true, true});
  expect_gradients_match("linear", {}, {random_array({2, 3, 4}, rng), random_array({5, 4}, rng)}, {true, true});
  expect_gradients_match("linear", {}, {random_array({3, 4}, rng), random_array({2, 4}, rng), random_array({2}, rng)},
                         {true, true, true});
  expect_gradients_match("einsum", {{"equation", std::string("bij,bjk->bik")}},
                         {random_array({2, 2, 3}, rng), random_array({2, 3, 2}, rng)}, {true, true});
  expect_gradients_match("einsum", {{"equation", std::string("ij,j,jk->ki")}},
                         {random_array({2, 3}, rng), random_array({3}, rng), random_array({3, 2}, rng)}, {true, true, true});
  expect_gradients_match("einsum", {{"equation", std::string("ii->i")}}, {random_array({3, 3}, rng)}, {true});
}

TEST(LinalgKernels, ForwardValues) {
  const NdArray a = array({2, 2}, {1, 2, 3, 4}), b = array({2, 2}, {5, 6, 7, 8});
  expect_values(forward_ok("matmul", {}, {a, b}), {19, 22, 43, 50});
  // linear: x W^T + b with W [out, in].
  expect_values(forward_ok("linear", {}, {array({1, 2}, {1, 2}), array({3, 2}, {1, 0, 0, 1, 1, 1}), array({3}, {0, 0, 10})}),
                {1, 2, 13});
  expect_values(forward_ok("einsum", {{"equation", std::string("ij,jk->ik")}}, {a, b}), {19, 22, 43, 50});
  expect_values(forward_ok("einsum", {{"equation", std::string("ij->")}}, {a}), {10});
  expect_values(forward_ok("einsum", {{"equation", std::string("ij->ji")}}, {a}), {1, 3, 2, 4});
}

TEST(LinalgKernels, Errors) {
  EXPECT_FALSE(forward("matmul", {}, {array({2, 3}, std::vector<double>(6)), array({2, 3}, std::vector<double>(6))}));
  EXPECT_FALSE(forward("bmm", {}, {array({2, 2}, std::vector<double>(4)), array({2, 2}, std::vector<double>(4))}));
  auto bad_linear = forward("linear", {}, {array({2}, {1, 2}), array({2, 3}, std::vector<double>(6))});
  ASSERT_FALSE(bad_linear);
  EXPECT_NE(bad_linear.error().message.find("linear"), std::string::npos);
  EXPECT_FALSE(forward("einsum", {{"equation", std::string("ij,jk")}}, {array({1, 1}, {1}), array({1, 1}, {1})}));
  EXPECT_FALSE(forward("einsum", {{"equation", std::string("ij,jk->ik")}}, {array({1, 2}, {1, 1}), array({3, 1}, {1, 1, 1})}));
}

}  // namespace
}  // namespace loom::verify::testing
