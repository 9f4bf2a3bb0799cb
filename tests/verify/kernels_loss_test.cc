#include <gtest/gtest.h>

#include "kernel_test_util.h"

namespace loom::verify::testing {
namespace {

std::mt19937_64 rng(37);

TEST(LossKernels, Gradients) {
  expect_gradients_match("cross_entropy", {}, {random_array({2, 3, 5}, rng), random_indices({2, 3}, 5, rng)}, {true, false});
  expect_gradients_match("cross_entropy", {{"label_smoothing", 0.2}, {"ignore_index", std::int64_t{1}}},
                         {random_array({6, 4}, rng), array({6}, {0, 1, 2, 3, 1, 0})}, {true, false});
  expect_gradients_match("nll_loss", {{"label_smoothing", 0.1}}, {random_array({4, 3}, rng), random_indices({4}, 3, rng)},
                         {true, false});
  expect_gradients_match("mse_loss", {}, {random_array({2, 3}, rng), random_array({2, 3}, rng)}, {true, false});
}

TEST(LossKernels, ForwardValues) {
  // Mean over two tokens: logits [1, 2, 3] labelled 2, and uniform logits (loss log 3).
  const NdArray logits = array({2, 3}, {1, 2, 3, 0, 0, 0});
  expect_values(forward_ok("cross_entropy", {}, {logits, array({2}, {2, 0})}), {0.753109126556245});
  // An ignored token (default ignore_index -100) adds nothing; the sum is divided by the counted tokens given
  // as a third input (torch's mean), else by every token.
  expect_values(forward_ok("cross_entropy", {}, {logits, array({2}, {-100, 0}), array({}, {1})}), {std::log(3.0)});
  expect_values(forward_ok("cross_entropy", {}, {logits, array({2}, {-100, 0})}), {std::log(3.0) / 2});
  // Label smoothing 0.1: 0.9 * -logp[2] + 0.1 / 3 * sum(-logp).
  expect_values(forward_ok("cross_entropy", {{"label_smoothing", 0.1}}, {array({1, 3}, {1, 2, 3}), array({1}, {2})}),
                {0.5076059644443801});
  expect_values(forward_ok("nll_loss", {}, {array({2, 2}, {-1, -2, -3, -4}), array({2}, {1, 0})}), {2.5});
  expect_values(forward_ok("mse_loss", {}, {array({2}, {1, 2}), array({2}, {0, 4})}), {2.5});
  EXPECT_EQ(forward_ok("mse_loss", {}, {array({2}, {1, 2}), array({2}, {0, 4})}).shape, ir::Shape{});
}

// Token shards divide by the full token count: their partial losses add up to the whole.
TEST(LossKernels, TokenShardsAddUp) {
  const NdArray logits = random_array({4, 3}, rng), labels = array({4}, {0, 2, 1, 1});
  const double whole = forward_ok("cross_entropy", {}, {logits, labels}).data[0];
  const Kernel* kernel = reference_kernels().find("cross_entropy");
  const ir::Attrs attrs;
  double summed = 0;
  for (std::int64_t first : {0, 2}) {
    const std::vector<std::vector<std::int64_t>> offsets = {{first, 0}, {first}};
    const std::vector<ir::Shape> full = {ir::Shape{4, 3}, ir::Shape{4}};
    const KernelContext ctx{attrs, offsets, full, {}, {}};
    auto part = kernel->forward(ctx, std::vector<NdArray>{slice_box(logits, offsets[0], ir::Shape{2, 3}),
                                                          slice_box(labels, offsets[1], ir::Shape{2})});
    ASSERT_TRUE(part);
    summed += (*part)[0].data[0];
  }
  EXPECT_NEAR(summed, whole, 1e-12);
}

TEST(LossKernels, Errors) {
  EXPECT_FALSE(forward("cross_entropy", {}, {array({1, 3}, {1, 2, 3}), array({1}, {3})}));
  EXPECT_FALSE(forward("cross_entropy", {}, {array({1, 3}, {1, 2, 3}), array({2}, {0, 0})}));
  EXPECT_FALSE(forward("mse_loss", {}, {array({2}, {1, 2}), array({1}, {1})}));
}

}  // namespace
}  // namespace loom::verify::testing
