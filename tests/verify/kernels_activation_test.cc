#include <gtest/gtest.h>

#include "kernel_test_util.h"

namespace loom::verify::testing {
namespace {

std::mt19937_64 rng(13);

TEST(ActivationKernels, Gradients) {
  const ir::Shape shape{2, 5};
  expect_gradients_match("gelu", {}, {random_array(shape, rng, -3, 3)}, {true});
  expect_gradients_match("gelu", {{"approximate", std::string("tanh")}}, {random_array(shape, rng, -3, 3)}, {true});
  expect_gradients_match("relu", {}, {array({4}, {-1, -0.2, 0.3, 2})}, {true});
  expect_gradients_match("silu", {}, {random_array(shape, rng, -3, 3)}, {true});
  expect_gradients_match("swiglu", {}, {random_array(shape, rng), random_array(shape, rng)}, {true, true});
  expect_gradients_match("geglu", {}, {random_array(shape, rng), random_array(shape, rng)}, {true, true});
  expect_gradients_match("dropout", {{"p", 0.3}}, {random_array(shape, rng)}, {true});
  for (const char* type : {"softmax", "log_softmax"}) {
    expect_gradients_match(type, {}, {random_array({2, 3, 4}, rng)}, {true});
    expect_gradients_match(type, {{"dim", std::int64_t{1}}}, {random_array({2, 3, 4}, rng)}, {true});
  }
}

TEST(ActivationKernels, ForwardValues) {
  expect_values(forward_ok("gelu", {}, {array({2}, {1.0, 0.0})}), {0.8413447460685429, 0.0}, 1e-15);
  expect_values(forward_ok("gelu", {{"approximate", std::string("tanh")}}, {array({1}, {1.0})}), {0.8411919906082768}, 1e-12);
  expect_values(forward_ok("silu", {}, {array({1}, {1.0})}), {0.7310585786300049});
  expect_values(forward_ok("relu", {}, {array({2}, {-1, 2})}), {0, 2});
  expect_values(forward_ok("softmax", {}, {array({3}, {1, 2, 3})}), {0.09003057317038046, 0.24472847105479764, 0.6652409557748219});
  expect_values(forward_ok("log_softmax", {}, {array({3}, {1, 2, 3})}), {-2.4076059644443806, -1.4076059644443806, -0.4076059644443806});
  // Along dim 0 of [[1, 1], [1, 3]]: columns normalize separately.
  expect_values(forward_ok("softmax", {{"dim", std::int64_t{0}}}, {array({2, 2}, {1, 1, 1, 3})}),
                {0.5, 0.11920292202211755, 0.5, 0.8807970779778823});
}

TEST(ActivationKernels, DropoutMaskIsIndependentOfTheSplit) {
  const ir::Attrs attrs{{"p", 0.5}};
  const NdArray x(ir::Shape{4, 6}, 1.0);
  const NdArray whole = forward_ok("dropout", attrs, {x});
  int dropped = 0;
  for (double v : whole.data) {
    EXPECT_TRUE(v == 0.0 || v == 2.0);
    dropped += v == 0.0 ? 1 : 0;
  }
  EXPECT_GT(dropped, 3);
  EXPECT_LT(dropped, 21);
  // Rows 2..3 as a shard: the context places it in the full [4, 6] tensor.
  const Kernel* kernel = reference_kernels().find("dropout");
  const std::vector<std::vector<std::int64_t>> offsets = {{2, 0}};
  const std::vector<ir::Shape> full = {ir::Shape{4, 6}};
  const KernelContext ctx{attrs, offsets, full, offsets, full};
  const NdArray shard_input(ir::Shape{2, 6}, 1.0);
  auto shard = kernel->forward(ctx, std::vector<NdArray>{shard_input});
  ASSERT_TRUE(shard);
  for (std::size_t i = 0; i < 12; ++i) EXPECT_EQ((*shard)[0].data[i], whole.data[12 + i]);
  // Another seed, another mask.
  EXPECT_NE(forward_ok("dropout", {{"p", 0.5}, {"seed", std::int64_t{5}}}, {x}).data, whole.data);
}

TEST(ActivationKernels, Errors) {
  EXPECT_FALSE(forward("gelu", {{"approximate", std::string("fast")}}, {array({1}, {1})}));
  EXPECT_FALSE(forward("softmax", {{"dim", std::int64_t{3}}}, {array({1}, {1})}));
  EXPECT_FALSE(forward("swiglu", {}, {array({2}, {1, 2}), array({3}, {1, 2, 3})}));
  EXPECT_FALSE(forward("dropout", {{"p", 1.0}}, {array({1}, {1})}));
}

}  // namespace
}  // namespace loom::verify::testing
