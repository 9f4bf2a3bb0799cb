// Reference kernels of the cross-entropy parts: composed, they equal cross_entropy (value and logits
// gradient) for random logits, labels, smoothing and ignored tokens; split along the vocabulary, the
// shards' outputs add up to the whole; and they stay finite where exp(logit) would overflow.
#include <cmath>

#include "kernel_test_util.h"

namespace loom::verify::testing {
namespace {

std::mt19937_64 rng(41);

struct Composite {
  double loss = 0;
  NdArray d_logits;  // for an upstream gradient of 1
};

// loss = from_parts(parts(x, y, shift), shift, y) with shift = target_logit(x, y), and its gradient
// through the backward kernels (the shift, a stabiliser, takes none).
Composite composite(const ir::Attrs& attrs, const NdArray& logits, const NdArray& labels) {
  const Kernel& target = *reference_kernels().find("target_logit");
  const Kernel& parts = *reference_kernels().find("cross_entropy_parts");
  const Kernel& from_parts = *reference_kernels().find("cross_entropy_from_parts");
  const KernelContext ctx{attrs, {}, {}, {}, {}};
  Composite c;
  auto shift = target.forward(ctx, std::vector<NdArray>{logits, labels});
  EXPECT_TRUE(shift) << shift.error().to_string();
  if (!shift) return c;
  const std::vector<NdArray> parts_in = {logits, labels, (*shift)[0]};
  auto sums = parts.forward(ctx, parts_in);
  EXPECT_TRUE(sums) << sums.error().to_string();
  if (!sums) return c;
  const std::vector<NdArray> loss_in = {(*sums)[0], (*shift)[0], (*sums)[1], labels};
  auto loss = from_parts.forward(ctx, loss_in);
  EXPECT_TRUE(loss) << loss.error().to_string();
  if (!loss) return c;
  c.loss = (*loss)[0].data[0];
  auto d_loss = from_parts.backward(ctx, loss_in, *loss, std::vector<NdArray>{NdArray(ir::Shape{}, 1.0)});
  EXPECT_TRUE(d_loss) << d_loss.error().to_string();
  if (!d_loss) return c;
  EXPECT_TRUE((*d_loss)[1].data.empty() && (*d_loss)[3].data.empty());
  auto d_parts = parts.backward(ctx, parts_in, *sums, std::vector<NdArray>{(*d_loss)[0], (*d_loss)[2]});
  EXPECT_TRUE(d_parts) << d_parts.error().to_string();
  if (d_parts) c.d_logits = (*d_parts)[0];
  return c;
}

// Labels in [0, v) with about one in five set to `ignore`.
NdArray labels_with_ignored(const ir::Shape& shape, std::int64_t v, double ignore) {
  NdArray labels = random_indices(shape, v, rng);
  std::uniform_int_distribution<int> pick(0, 4);
  for (double& y : labels.data)
    if (pick(rng) == 0) y = ignore;
  return labels;
}

TEST(VocabParallelKernels, ComposedTheyAreCrossEntropy) {
  const Kernel& cross_entropy = *reference_kernels().find("cross_entropy");
  for (int trial = 0; trial < 200; ++trial) {
    SCOPED_TRACE(trial);
    std::uniform_int_distribution<std::int64_t> size(1, 6);
    const ir::Shape tokens{size(rng), size(rng)};
    const std::int64_t v = size(rng) + 1;
    ir::Attrs attrs;
    if (trial % 2 == 1) attrs["label_smoothing"] = std::uniform_real_distribution<double>(0, 0.9)(rng);
    if (trial % 3 == 1) attrs["ignore_index"] = std::int64_t{v - 1};
    const double ignore = trial % 3 == 1 ? static_cast<double>(v - 1) : -100.0;
    const NdArray logits = random_array(ir::Shape{tokens[0], tokens[1], v}, rng, -8, 8);
    const NdArray labels = labels_with_ignored(tokens, v, ignore);
    const KernelContext ctx{attrs, {}, {}, {}, {}};
    const std::vector<NdArray> in = {logits, labels};
    auto expected = cross_entropy.forward(ctx, in);
    ASSERT_TRUE(expected);
    auto expected_grad = cross_entropy.backward(ctx, in, *expected, std::vector<NdArray>{NdArray(ir::Shape{}, 1.0)});
    ASSERT_TRUE(expected_grad);
    const Composite got = composite(attrs, logits, labels);
    EXPECT_NEAR(got.loss, (*expected)[0].data[0], 1e-12);
    ASSERT_EQ(got.d_logits.shape, logits.shape);
    for (std::size_t i = 0; i < logits.data.size(); ++i)
      EXPECT_NEAR(got.d_logits.data[i], (*expected_grad)[0].data[i], 1e-12) << "element " << i;
  }
}

TEST(VocabParallelKernels, Gradients) {
  const NdArray logits = random_array({2, 3, 5}, rng), labels = random_indices({2, 3}, 5, rng);
  const ir::Attrs smoothed = {{"label_smoothing", 0.2}, {"ignore_index", std::int64_t{1}}};
  for (const ir::Attrs& attrs : {ir::Attrs{}, smoothed}) {
    expect_gradients_match("target_logit", attrs, {logits, labels}, {true, false});
    expect_gradients_match("cross_entropy_parts", attrs, {logits, labels, random_array({2, 3}, rng)}, {true, false, false});
  }
  // The sums must be positive; the shift is held constant (no gradient).
  expect_gradients_match("cross_entropy_from_parts", {},
                         {random_array({2, 3}, rng, 0.5, 3), random_array({2, 3}, rng), random_array({2, 3}, rng),
                          random_indices({2, 3}, 5, rng)},
                         {true, false, true, false});
}

// Shards of the vocabulary (offset and full shape from the context) give value parts that add up.
TEST(VocabParallelKernels, VocabularyShardsAddUp) {
  const ir::Shape full{3, 4, 12};
  const NdArray logits = random_array(full, rng, -4, 4);
  const NdArray labels = labels_with_ignored({3, 4}, 12, -100);
  const NdArray shift = random_array({3, 4}, rng);
  const ir::Attrs attrs = {{"label_smoothing", 0.3}};
  for (const char* type : {"target_logit", "cross_entropy_parts"}) {
    SCOPED_TRACE(type);
    const Kernel& kernel = *reference_kernels().find(type);
    const bool parts = std::string_view(type) == "cross_entropy_parts";
    std::vector<NdArray> in = {logits, labels};
    if (parts) in.push_back(shift);
    auto whole = kernel.forward(KernelContext{attrs, {}, {}, {}, {}}, in);
    ASSERT_TRUE(whole);
    // Three shards of 4 classes; the gradient of each shard is the whole gradient's slice.
    const std::vector<NdArray> upstream(whole->size(), random_array({3, 4}, rng));
    auto whole_grad = kernel.backward(KernelContext{attrs, {}, {}, {}, {}}, in, *whole, upstream);
    ASSERT_TRUE(whole_grad);
    std::vector<NdArray> summed(whole->size(), NdArray(ir::Shape{3, 4}));
    for (std::int64_t first : {0, 4, 8}) {
      const std::vector<std::vector<std::int64_t>> offsets = {{0, 0, first}, {0, 0}, {0, 0}};
      const std::vector<ir::Shape> shapes = {full, ir::Shape{3, 4}, ir::Shape{3, 4}};
      const KernelContext ctx{attrs, std::span(offsets).first(in.size()), std::span(shapes).first(in.size()), {}, {}};
      std::vector<NdArray> shard = in;
      shard[0] = slice_box(logits, offsets[0], ir::Shape{3, 4, 4});
      auto out = kernel.forward(ctx, shard);
      ASSERT_TRUE(out) << out.error().to_string();
      for (std::size_t o = 0; o < out->size(); ++o)
        for (std::size_t i = 0; i < summed[o].data.size(); ++i) summed[o].data[i] += (*out)[o].data[i];
      auto grad = kernel.backward(ctx, shard, *out, upstream);
      ASSERT_TRUE(grad) << grad.error().to_string();
      const NdArray expected = slice_box((*whole_grad)[0], offsets[0], ir::Shape{3, 4, 4});
      for (std::size_t i = 0; i < expected.data.size(); ++i) EXPECT_NEAR((*grad)[0].data[i], expected.data[i], 1e-12);
    }
    for (std::size_t o = 0; o < whole->size(); ++o)
      for (std::size_t i = 0; i < summed[o].data.size(); ++i)
        EXPECT_NEAR(summed[o].data[i], (*whole)[o].data[i], 1e-12 * std::max(1.0, std::abs((*whole)[o].data[i])));
  }
}

// Logits near 1000: exp(1000) overflows a double, but the target-shifted sum holds exp(0) = 1 and
// stays finite, and the loss agrees with cross_entropy's max-shifted one.
TEST(VocabParallelKernels, TheTargetShiftKeepsLargeLogitsFinite) {
  const NdArray logits = array({2, 3}, {1000, 1002, 1001, -1000, -1003, -999});
  const NdArray labels = array({2}, {0, 2});
  const Composite got = composite({}, logits, labels);
  const double expected = forward_ok("cross_entropy", {}, {logits, labels}).data[0];
  EXPECT_TRUE(std::isfinite(got.loss));
  EXPECT_NEAR(got.loss, expected, 1e-12);
}

TEST(VocabParallelKernels, Errors) {
  // A label outside the full vocabulary, a non-positive sum, mismatched per-token shapes.
  EXPECT_FALSE(forward("target_logit", {}, {array({1, 3}, {1, 2, 3}), array({1}, {3})}));
  EXPECT_FALSE(forward("cross_entropy_parts", {}, {array({1, 3}, {1, 2, 3}), array({1}, {0}), array({2}, {0, 0})}));
  EXPECT_FALSE(forward("cross_entropy_from_parts", {}, {array({1}, {0}), array({1}, {0}), array({1}, {0}), array({1}, {0})}));
}

}  // namespace
}  // namespace loom::verify::testing
