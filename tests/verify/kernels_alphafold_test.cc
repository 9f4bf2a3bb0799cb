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

std::vector<NdArray> random_inputs(const std::vector<Shape>& shapes, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<NdArray> inputs;
  for (const Shape& s : shapes) inputs.push_back(random_array(s, rng));
  return inputs;
}

void expect_near_all(const NdArray& a, const NdArray& b, double tolerance = 1e-12) {
  ASSERT_EQ(a.shape, b.shape);
  for (std::size_t i = 0; i < a.data.size(); ++i) EXPECT_NEAR(a.data[i], b.data[i], tolerance) << "element " << i;
}

// Swaps dims 1 and 2 of a [b x y c] tensor.
NdArray swap12(const NdArray& x) {
  const std::vector<std::size_t> perm = {0, 2, 1, 3};
  auto out = permute(x, perm);
  EXPECT_TRUE(out);
  return *out;
}

// Shapes: MSA [1 s=2 r=3 c=2], pair [1 3 3 2], 2 heads of dim 2, 3 output channels.
const std::vector<Shape> kRowAttention = {Shape{1, 2, 3, 2}, Shape{1, 3, 3, 2}, Shape{4, 2, 2, 2}, Shape{2, 2},
                                          Shape{2, 2},       Shape{3, 2, 2},    Shape{3}};
const std::vector<Shape> kColumnAttention = {Shape{1, 3, 2, 2}, Shape{4, 2, 2, 2}, Shape{2, 2}, Shape{2, 2, 2}, Shape{2}};
const std::vector<Shape> kTriangleAttention = {Shape{1, 3, 3, 2}, Shape{1, 3, 3, 2}, Shape{4, 2, 1, 2}, Shape{2, 1},
                                               Shape{2, 2},       Shape{2, 2, 1},    Shape{2}};
const std::vector<Shape> kTriangleMultiplication = {Shape{1, 3, 3, 2}, Shape{1, 3, 3, 2}, Shape{1, 3, 3, 2}, Shape{4, 3, 2},
                                                    Shape{4, 3},       Shape{3},          Shape{3},          Shape{2, 3},
                                                    Shape{2},          Shape{2, 2},       Shape{2}};
const std::vector<Shape> kOuterProductMean = {Shape{1, 3, 2, 2}, Shape{1, 3, 3, 2}, Shape{2, 2, 2},
                                              Shape{2, 2},       Shape{2, 4},       Shape{2}};

TEST(AlphafoldKernels, ColumnAttentionOverOneSequenceIsTheGatedValue) {
  // One key: softmax is 1, so out = w_o (sigmoid(w_g m + b_g) * w_v m) + b_o.
  const NdArray m(Shape{1, 1, 1, 1}, {1.0});
  const NdArray w_qkvg(Shape{4, 1, 1, 1}, {0.3, 0.7, 2.0, 1.0}), b_g(Shape{1, 1}, {0.5});
  const NdArray w_o(Shape{1, 1, 1}, {3.0}), b_o(Shape{1}, {0.25});
  const NdArray out = forward1("msa_column_attention", {}, {m, w_qkvg, b_g, w_o, b_o});
  expect_near_all(out, NdArray(Shape{1, 1, 1, 1}, {3.0 * 2.0 / (1 + std::exp(-1.5)) + 0.25}));
}

TEST(AlphafoldKernels, RowAttentionOnThePairIsTriangleAttentionAroundTheStartingNode) {
  // Alg. 7 with m = z is Alg. 13: row i attends along j with bias z[j, k].
  std::vector<NdArray> in = random_inputs(kTriangleAttention, 3);
  in[1] = in[0];
  const NdArray triangle = forward1("triangle_attention", {{"mode", std::string("starting")}}, in);
  expect_near_all(forward1("msa_row_attention_with_pair_bias", {}, in), triangle);
}

TEST(AlphafoldKernels, EndingNodeIsStartingNodeOnTheTransposedPair) {
  std::vector<NdArray> in = random_inputs(kTriangleAttention, 4);
  in[1] = in[0];
  std::vector<NdArray> transposed = in;
  transposed[0] = transposed[1] = swap12(in[0]);
  expect_near_all(forward1("triangle_attention", {{"mode", std::string("ending")}}, in),
                  swap12(forward1("triangle_attention", {{"mode", std::string("starting")}}, transposed)));
}

TEST(AlphafoldKernels, IncomingEdgesAreOutgoingEdgesOfTheTransposedPair) {
  const std::vector<NdArray> in = random_inputs(kTriangleMultiplication, 5);
  std::vector<NdArray> transposed = in;
  transposed[0] = swap12(in[0]);
  transposed[1] = swap12(in[1]);
  expect_near_all(forward1("triangle_multiplication", {{"mode", std::string("incoming")}}, in),
                  forward1("triangle_multiplication", {{"mode", std::string("outgoing")}}, transposed));
}

TEST(AlphafoldKernels, TriangleMultiplicationOfAKnownPair) {
  // One residue, one channel everywhere: a = sigmoid(1) * 2, b = sigmoid(0) * 1, the layer norm of a
  // single channel is its bias (0.5), out = sigmoid(w_g z + b_g) * (w_o 0.5 + b_o).
  const NdArray z(Shape{1, 1, 1, 1}, {1.0});
  const std::vector<NdArray> in = {z, z, z, NdArray(Shape{4, 1, 1}, {2, 1, 1, 0}), NdArray(Shape{4, 1}, {0, 0, 0, 0}),
                                   NdArray(Shape{1}, {3.0}), NdArray(Shape{1}, {0.5}), NdArray(Shape{1, 1}, {4.0}),
                                   NdArray(Shape{1}, {1.0}), NdArray(Shape{1, 1}, {2.0}), NdArray(Shape{1}, {-1.0})};
  const double gate = 1 / (1 + std::exp(-1.0));
  expect_near_all(forward1("triangle_multiplication", {{"mode", std::string("outgoing")}}, in),
                  NdArray(Shape{1, 1, 1, 1}, {gate * (4.0 * 0.5 + 1.0)}));
}

TEST(AlphafoldKernels, OuterProductMeanOfAKnownMsa) {
  // a = 1 m + 0, b = 3 m + 1 per sequence; mean over m = 1, 2 of a b = (1 * 4 + 2 * 7) / 2 = 9.
  const NdArray m(Shape{1, 2, 1, 1}, {1, 2});
  const std::vector<NdArray> in = {m, m, NdArray(Shape{2, 1, 1}, {1, 3}), NdArray(Shape{2, 1}, {0, 1}),
                                   NdArray(Shape{1, 1}, {0.5}), NdArray(Shape{1}, {1})};
  expect_near_all(forward1("outer_product_mean", {}, in), NdArray(Shape{1, 1, 1, 1}, {0.5 * 9 + 1}));
}

// Runs `type` on two parts that split `dims[k]` of input `k` in halves (one dim per split input),
// with offsets and full shapes in the context, and sums the outputs: a split along a reduction must
// leave parts that add up to the whole.
NdArray sum_of_value_parts(std::string_view type, const std::vector<NdArray>& inputs,
                           const std::vector<std::pair<std::size_t, std::size_t>>& splits) {
  NdArray total;
  for (int part = 0; part < 2; ++part) {
    std::vector<NdArray> local = inputs;
    Offsets offsets(inputs.size());
    std::vector<Shape> full;
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      offsets[i].assign(inputs[i].shape.rank(), 0);
      full.push_back(inputs[i].shape);
    }
    for (const auto& [input, dim] : splits) {
      Shape size = inputs[input].shape;
      size.dims[dim] /= 2;
      offsets[input][dim] = part * size.dims[dim];
      local[input] = slice_box(inputs[input], offsets[input], size);
    }
    const ir::Attrs no_attrs;
    const KernelContext ctx{no_attrs, offsets, full, {}, {}};
    auto out = kernel(type).forward(ctx, local);
    EXPECT_TRUE(out) << out.error().to_string();
    if (!out) return {};
    if (part == 0) total = (*out)[0];
    else
      for (std::size_t i = 0; i < total.data.size(); ++i) total.data[i] += (*out)[0].data[i];
  }
  return total;
}

TEST(AlphafoldKernels, HeadSplitPartsSumToTheWholeAttention) {
  // Heads live in w_qkvg (dim 1), b_g (0), w_bias (0) and w_o (1); b_o is added by the first part only.
  const std::vector<NdArray> in = random_inputs(kRowAttention, 6);
  expect_near_all(sum_of_value_parts("msa_row_attention_with_pair_bias", in, {{2, 1}, {3, 0}, {4, 0}, {5, 1}}),
                  forward1("msa_row_attention_with_pair_bias", {}, in));
}

TEST(AlphafoldKernels, SequenceSplitPartsSumToTheWholeOuterProductMean) {
  std::vector<Shape> shapes = kOuterProductMean;
  shapes[0] = shapes[1] = Shape{1, 4, 3, 2};
  const std::vector<NdArray> in = random_inputs(shapes, 7);
  expect_near_all(sum_of_value_parts("outer_product_mean", in, {{0, 1}, {1, 1}}), forward1("outer_product_mean", {}, in));
}

TEST(AlphafoldKernels, RecycleDetachIsAnIdentityWithoutBackward) {
  const NdArray x = random_inputs({Shape{2, 3}}, 8)[0];
  EXPECT_EQ(forward1("recycle_detach", {}, {x}), x);
  EXPECT_FALSE(kernel("recycle_detach").backward);
}

struct GradientCase {
  std::string name, type;
  ir::Attrs attrs;
  std::vector<Shape> inputs;
};
void PrintTo(const GradientCase& c, std::ostream* os) { *os << c.name; }

class AlphafoldGradient : public ::testing::TestWithParam<GradientCase> {};

TEST_P(AlphafoldGradient, MatchesFiniteDifferences) {
  const GradientCase& c = GetParam();
  const std::vector<NdArray> inputs = random_inputs(c.inputs, 31);
  expect_gradients_match(c.type, c.attrs, inputs, std::vector<bool>(inputs.size(), true));
}

INSTANTIATE_TEST_SUITE_P(
    Alphafold, AlphafoldGradient,
    ::testing::Values(
        GradientCase{"msa_row_attention", "msa_row_attention_with_pair_bias", {}, kRowAttention},
        GradientCase{"msa_column_attention", "msa_column_attention", {}, kColumnAttention},
        GradientCase{"triangle_attention_starting", "triangle_attention", {{"mode", std::string("starting")}},
                     kTriangleAttention},
        GradientCase{"triangle_attention_ending", "triangle_attention", {{"mode", std::string("ending")}},
                     kTriangleAttention},
        GradientCase{"triangle_multiplication_outgoing", "triangle_multiplication", {{"mode", std::string("outgoing")}},
                     kTriangleMultiplication},
        GradientCase{"triangle_multiplication_incoming", "triangle_multiplication", {{"mode", std::string("incoming")}},
                     kTriangleMultiplication},
        GradientCase{"outer_product_mean", "outer_product_mean", {}, kOuterProductMean}),
    [](const ::testing::TestParamInfo<GradientCase>& info) { return info.param.name; });

TEST(AlphafoldKernels, BadInputsAreErrorsNamingTheOp) {
  std::vector<NdArray> row = random_inputs(kRowAttention, 9);
  row[2] = NdArray(Shape{3, 2, 2, 2});  // w_qkvg must stack 4 projections
  std::vector<NdArray> trimul = random_inputs(kTriangleMultiplication, 9);
  trimul[2] = NdArray(Shape{1, 2, 3, 2});  // the gate input must cover [i j]
  const std::vector<std::tuple<std::string, ir::Attrs, std::vector<NdArray>>> cases = {
      {"msa_row_attention_with_pair_bias", {}, row},
      {"msa_column_attention", {}, random_inputs({Shape{1, 3, 2, 2}}, 9)},
      {"triangle_attention", {{"mode", std::string("sideways")}}, random_inputs(kTriangleAttention, 9)},
      {"triangle_attention", {}, random_inputs(kTriangleAttention, 9)},
      {"triangle_multiplication", {{"mode", std::string("outgoing")}}, trimul},
      {"outer_product_mean", {}, random_inputs({Shape{1, 3, 2, 2}, Shape{1, 2, 2, 2}, Shape{2, 2, 2}, Shape{2, 2},
                                                Shape{2, 4}, Shape{2}},
                                               9)},
      {"recycle_detach", {}, {}},
  };
  for (const auto& [type, attrs, inputs] : cases) {
    auto out = run_forward(kernel(type), attrs, inputs);
    ASSERT_FALSE(out) << type;
    EXPECT_NE(out.error().message.find(type), std::string::npos) << out.error().message;
  }
}

}  // namespace
}  // namespace loom::verify
