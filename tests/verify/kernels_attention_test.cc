#include <gtest/gtest.h>

#include <cmath>

#include "gradient_check.h"
#include "loom/ops/registry.h"
#include "loom/verify/ndarray_ops.h"

namespace loom::verify {
namespace {

using ir::Shape;
using testing::expect_gradients_match;
using testing::random_array;
using testing::run_forward;
using Offsets = std::vector<std::vector<std::int64_t>>;

constexpr std::string_view kSdpa = "scaled_dot_product_attention";

const Kernel& kernel(std::string_view type) {
  const Kernel* k = reference_kernels().find(type);
  EXPECT_NE(k, nullptr) << type;
  return *k;
}

NdArray forward1(std::string_view type, const ir::Attrs& attrs, const std::vector<NdArray>& inputs) {
  auto out = run_forward(kernel(type), attrs, inputs);
  EXPECT_TRUE(out) << out.error().to_string();
  return out ? (*out)[0] : NdArray{};
}

void expect_near_all(const NdArray& a, const NdArray& b, double tolerance = 1e-12) {
  ASSERT_EQ(a.shape, b.shape);
  for (std::size_t i = 0; i < a.data.size(); ++i) EXPECT_NEAR(a.data[i], b.data[i], tolerance) << "element " << i;
}

TEST(AttentionKernels, OneKeyReturnsItsValue) {
  std::mt19937_64 rng(1);
  const NdArray q = random_array(Shape{1, 2, 3, 4}, rng), k = random_array(Shape{1, 2, 1, 4}, rng);
  const NdArray v(Shape{1, 2, 1, 2}, {5, 6, 7, 8});
  const NdArray out = forward1(kSdpa, {}, {q, k, v});
  const NdArray expected(Shape{1, 2, 3, 2}, {5, 6, 5, 6, 5, 6, 7, 8, 7, 8, 7, 8});
  expect_near_all(out, expected);
}

TEST(AttentionKernels, ZeroQueryAveragesValuesAndCausalFirstRowSeesOneKey) {
  std::mt19937_64 rng(2);
  const NdArray q(Shape{1, 1, 2, 2}), k = random_array(Shape{1, 1, 2, 2}, rng);
  const NdArray v(Shape{1, 1, 2, 1}, {1, 3});
  expect_near_all(forward1(kSdpa, {}, {q, k, v}), NdArray(Shape{1, 1, 2, 1}, {2, 2}));
  expect_near_all(forward1(kSdpa, {{"causal", true}}, {q, k, v}), NdArray(Shape{1, 1, 2, 1}, {1, 2}));
}

TEST(AttentionKernels, ScaleAndBiasEnterTheLogits) {
  // Two keys, logits (scale * q.k + bias) = (0 + 0, 2 * 1 + ln 3 - 2): weights 1/4, 3/4.
  const NdArray q(Shape{1, 1, 1, 1}, {1}), k(Shape{1, 1, 2, 1}, {0, 1}), v(Shape{1, 1, 2, 1}, {4, 8});
  const NdArray bias(Shape{1, 1, 2}, {0, std::log(3.0) - 2});
  expect_near_all(forward1(kSdpa, {{"scale", 2.0}}, {q, k, v, bias}), NdArray(Shape{1, 1, 1, 1}, {7}));
}

TEST(AttentionKernels, GroupedQueryHeadsShareTheirKeyValueHead) {
  std::mt19937_64 rng(3);
  const NdArray q = random_array(Shape{1, 4, 3, 2}, rng), k = random_array(Shape{1, 2, 3, 2}, rng),
                v = random_array(Shape{1, 2, 3, 2}, rng);
  // Repeating each kv head twice must give the same output (query head j uses kv head j / 2).
  NdArray k4(Shape{1, 4, 3, 2}), v4(Shape{1, 4, 3, 2});
  for (std::int64_t h = 0; h < 4; ++h) {
    add_into_box(k4, std::vector<std::int64_t>{0, h, 0, 0}, slice_box(k, std::vector<std::int64_t>{0, h / 2, 0, 0}, Shape{1, 1, 3, 2}));
    add_into_box(v4, std::vector<std::int64_t>{0, h, 0, 0}, slice_box(v, std::vector<std::int64_t>{0, h / 2, 0, 0}, Shape{1, 1, 3, 2}));
  }
  expect_near_all(forward1(kSdpa, {{"causal", true}}, {q, k, v}), forward1(kSdpa, {{"causal", true}}, {q, k4, v4}));
}

struct SdpaCase {
  std::string name;
  ir::Attrs attrs;
  Shape q, k, v;
  std::optional<Shape> bias;
};
void PrintTo(const SdpaCase& c, std::ostream* os) { *os << c.name; }

class SdpaGradient : public ::testing::TestWithParam<SdpaCase> {};

TEST_P(SdpaGradient, MatchesFiniteDifferences) {
  const SdpaCase& c = GetParam();
  std::mt19937_64 rng(11);
  std::vector<NdArray> inputs = {random_array(c.q, rng), random_array(c.k, rng), random_array(c.v, rng)};
  if (c.bias) inputs.push_back(random_array(*c.bias, rng));
  expect_gradients_match(std::string(kSdpa), c.attrs, inputs, std::vector<bool>(inputs.size(), true));
}

INSTANTIATE_TEST_SUITE_P(
    Attention, SdpaGradient,
    ::testing::Values(SdpaCase{"plain", {}, Shape{1, 2, 3, 2}, Shape{1, 2, 3, 2}, Shape{1, 2, 3, 3}, {}},
                      SdpaCase{"causal", {{"causal", true}}, Shape{2, 1, 3, 2}, Shape{2, 1, 3, 2}, Shape{2, 1, 3, 2}, {}},
                      SdpaCase{"causal_longer_keys", {{"causal", true}}, Shape{1, 1, 2, 2}, Shape{1, 1, 4, 2},
                               Shape{1, 1, 4, 1}, {}},
                      SdpaCase{"gqa_causal_scaled", {{"causal", true}, {"scale", 0.7}}, Shape{1, 4, 3, 2},
                               Shape{1, 2, 3, 2}, Shape{1, 2, 3, 2}, {}},
                      SdpaCase{"bias_rank3", {}, Shape{2, 2, 3, 2}, Shape{2, 2, 3, 2}, Shape{2, 2, 3, 2}, Shape{2, 3, 3}},
                      SdpaCase{"bias_rank4_broadcast", {{"causal", true}}, Shape{2, 2, 3, 2}, Shape{2, 1, 3, 2},
                               Shape{2, 1, 3, 2}, Shape{2, 1, 1, 3}},
                      SdpaCase{"bias_rank4_full", {{"dropout", 0.0}}, Shape{1, 2, 2, 2}, Shape{1, 2, 3, 2},
                               Shape{1, 2, 3, 2}, Shape{1, 2, 2, 3}}),
    [](const ::testing::TestParamInfo<SdpaCase>& info) { return info.param.name; });

// Runs `type` on the halves [0, s/2) and [s/2, s) of input 0 along dim 2 (other inputs whole) with
// offsets and full shapes in the context, and concatenates the outputs.
NdArray run_split_along_s(std::string_view type, const ir::Attrs& attrs, const std::vector<NdArray>& inputs) {
  const Shape& full = inputs[0].shape;
  const std::int64_t half = full[2] / 2;
  const NdArray whole = forward1(type, attrs, inputs);
  NdArray joined(whole.shape);
  for (std::int64_t start : {std::int64_t{0}, half}) {
    std::vector<NdArray> part = inputs;
    part[0] = slice_box(inputs[0], std::vector<std::int64_t>{0, 0, start, 0}, Shape{full[0], full[1], half, full[3]});
    Offsets in_offsets(inputs.size(), std::vector<std::int64_t>(4, 0));
    in_offsets[0][2] = start;
    const Offsets out_offsets = {{0, 0, start, 0}};
    std::vector<Shape> in_full;
    for (const NdArray& x : inputs) in_full.push_back(x.shape);
    const std::vector<Shape> out_full = {whole.shape};
    const KernelContext ctx{attrs, in_offsets, in_full, out_offsets, out_full};
    auto out = kernel(type).forward(ctx, part);
    EXPECT_TRUE(out) << out.error().to_string();
    if (out) add_into_box(joined, std::vector<std::int64_t>{0, 0, start, 0}, (*out)[0]);
  }
  return joined;
}

TEST(AttentionKernels, CausalSplitAlongQueriesMatchesTheWhole) {
  std::mt19937_64 rng(5);
  const std::vector<NdArray> inputs = {random_array(Shape{1, 2, 4, 2}, rng), random_array(Shape{1, 1, 4, 2}, rng),
                                       random_array(Shape{1, 1, 4, 3}, rng)};
  const ir::Attrs attrs = {{"causal", true}};
  expect_near_all(run_split_along_s(kSdpa, attrs, inputs), forward1(kSdpa, attrs, inputs));
}

TEST(AttentionKernels, CausalBackwardUsesGlobalPositions) {
  // The second half of the queries sees every key of the first half: its gradient w.r.t. k equals the
  // whole op's gradient restricted to those query rows.
  std::mt19937_64 rng(6);
  const NdArray q = random_array(Shape{1, 1, 4, 2}, rng), k = random_array(Shape{1, 1, 4, 2}, rng),
                v = random_array(Shape{1, 1, 4, 2}, rng);
  NdArray dout = random_array(Shape{1, 1, 4, 2}, rng);
  const ir::Attrs attrs = {{"causal", true}};
  NdArray masked_dout = dout;
  for (std::size_t i = 0; i < 4; ++i) masked_dout.data[i] = 0;  // rows 0, 1 get no gradient
  const KernelContext whole_ctx{attrs, {}, {}, {}, {}};
  const std::vector<NdArray> whole_in = {q, k, v};
  auto whole = kernel(kSdpa).backward(whole_ctx, whole_in, {}, std::vector<NdArray>{masked_dout});
  ASSERT_TRUE(whole) << whole.error().to_string();
  const Offsets in_offsets = {{0, 0, 2, 0}, {0, 0, 0, 0}, {0, 0, 0, 0}}, out_offsets = {{0, 0, 2, 0}};
  const KernelContext part_ctx{attrs, in_offsets, {}, out_offsets, {}};
  const std::vector<NdArray> part_in = {slice_box(q, std::vector<std::int64_t>{0, 0, 2, 0}, Shape{1, 1, 2, 2}), k, v};
  const std::vector<NdArray> part_dout = {slice_box(dout, std::vector<std::int64_t>{0, 0, 2, 0}, Shape{1, 1, 2, 2})};
  auto part = kernel(kSdpa).backward(part_ctx, part_in, {}, part_dout);
  ASSERT_TRUE(part) << part.error().to_string();
  expect_near_all((*part)[1], (*whole)[1]);
  expect_near_all((*part)[2], (*whole)[2]);
}

TEST(AttentionKernels, SdpaRejectsBadInputsNamingTheOp) {
  const NdArray q(Shape{1, 3, 2, 2}), k(Shape{1, 2, 2, 2}), v(Shape{1, 2, 2, 2});
  for (const std::vector<NdArray>& inputs :
       {std::vector<NdArray>{q, k}, std::vector<NdArray>{q, k, v}, std::vector<NdArray>{k, k, v, NdArray(Shape{2})},
        std::vector<NdArray>{k, k, NdArray(Shape{1, 2, 3, 2})}}) {
    auto out = run_forward(kernel(kSdpa), {}, inputs);
    ASSERT_FALSE(out);
    EXPECT_NE(out.error().message.find(kSdpa), std::string::npos) << out.error().message;
  }
}

// Eager attention's causal mask: key j after query i (global positions) becomes -10000, so softmax over the
// masked scores equals the fused op's causal probabilities; its gradient passes the visible scores only.
TEST(AttentionKernels, CausalMaskHidesLaterKeysInGlobalPositions) {
  const NdArray x(Shape{1, 1, 2, 3}, {1, 2, 3, 4, 5, 6});
  expect_near_all(forward1("causal_mask", {}, {x}), NdArray(Shape{1, 1, 2, 3}, {1, -10000, -10000, 4, 5, -10000}));
  std::mt19937_64 rng(9);
  const std::vector<NdArray> scores = {random_array(Shape{2, 2, 4, 4}, rng)};
  expect_near_all(run_split_along_s("causal_mask", {}, scores), forward1("causal_mask", {}, scores));
  // Softmax of the masked q k^T equals the fused causal attention's probabilities: with v the identity,
  // attention returns them.
  const NdArray q = random_array(Shape{1, 1, 4, 2}, rng), k = random_array(Shape{1, 1, 4, 2}, rng);
  NdArray identity(Shape{1, 1, 4, 4});
  for (std::size_t i = 0; i < 4; ++i) identity.data[i * 5] = 1;
  NdArray logits(Shape{1, 1, 4, 4});
  for (std::size_t i = 0; i < 4; ++i)
    for (std::size_t j = 0; j < 4; ++j)
      logits.data[i * 4 + j] = (q.data[i * 2] * k.data[j * 2] + q.data[i * 2 + 1] * k.data[j * 2 + 1]) / std::sqrt(2.0);
  const NdArray probs = forward1("softmax", {{"dim", std::int64_t{-1}}}, {forward1("causal_mask", {}, {logits})});
  expect_near_all(probs, forward1(kSdpa, {{"causal", true}}, {q, k, identity}));
  expect_gradients_match("causal_mask", {}, {random_array(Shape{1, 2, 3, 3}, rng)}, {true});
}

TEST(AttentionKernels, RotaryRotatesHalvesByPosition) {
  // d = 2: one pair (x0, x1) rotated by angle = position.
  const NdArray x(Shape{1, 1, 2, 2}, {1, 2, 1, 2});
  const NdArray expected(Shape{1, 1, 2, 2}, {1, 2, std::cos(1.0) - 2 * std::sin(1.0), 2 * std::cos(1.0) + std::sin(1.0)});
  expect_near_all(forward1("rotary_embedding", {}, {x}), expected);
  // d = 4, base 100: pair (0, 2) turns by p, pair (1, 3) by p / 10.
  const NdArray y(Shape{1, 1, 2, 4}, {0, 0, 0, 0, 1, 1, 0, 0});
  const NdArray rotated = forward1("rotary_embedding", {{"base", 100.0}}, {y});
  const NdArray expected_y(Shape{1, 1, 2, 4}, {0, 0, 0, 0, std::cos(1.0), std::cos(0.1), std::sin(1.0), std::sin(0.1)});
  expect_near_all(rotated, expected_y);
}

TEST(AttentionKernels, RotarySplitAlongSequenceMatchesTheWhole) {
  std::mt19937_64 rng(7);
  const std::vector<NdArray> inputs = {random_array(Shape{2, 2, 6, 4}, rng)};
  expect_near_all(run_split_along_s("rotary_embedding", {}, inputs), forward1("rotary_embedding", {}, inputs));
}

TEST(AttentionKernels, RotaryGradient) {
  std::mt19937_64 rng(8);
  expect_gradients_match("rotary_embedding", {{"base", 50.0}}, {random_array(Shape{1, 2, 3, 4}, rng)}, {true});
  auto odd = run_forward(kernel("rotary_embedding"), {}, {NdArray(Shape{1, 1, 2, 3})});
  ASSERT_FALSE(odd);
  EXPECT_NE(odd.error().message.find("rotary_embedding"), std::string::npos);
}

}  // namespace
}  // namespace loom::verify
