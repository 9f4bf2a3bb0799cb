// Reference kernels of the AlphaFold2 Evoformer ops (Jumper et al. 2021, supplement Alg. 7-14), in
// the fused form src/ops/alphafold.cc declares: each op takes already layer-normed activations plus
// its weights, in the definition's input order.
//
// Value-split safety: the gated attentions sum over heads and outer_product_mean over sequences, so
// a split there leaves partial sums. Their output bias b_o is added only by the part whose slice
// starts at 0 on that axis (heads of w_qkvg, sequences of m), so the parts still sum to the
// single-device output; on one device that part is the whole op.
#include <array>
#include <cmath>
#include <vector>

#include "loom/verify/kernel_families.h"
#include "loom/verify/ndarray_ops.h"

namespace loom::verify {
namespace {

using Tensors = Expected<std::vector<NdArray>>;
using Vec = std::vector<double>;

std::size_t idx(std::int64_t i) { return static_cast<std::size_t>(i); }
double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

std::int64_t offset_along(const KernelContext& ctx, std::size_t tensor, std::size_t dim) {
  if (tensor >= ctx.input_offsets.size() || dim >= ctx.input_offsets[tensor].size()) return 0;
  return ctx.input_offsets[tensor][dim];
}

Expected<void> expect_shape(std::string_view op, std::string_view what, const NdArray& x, const ir::Shape& shape) {
  if (x.shape != shape) return failf("{}: {} must be {}, got {}", op, what, shape.to_string(), x.shape.to_string());
  return {};
}

Expected<void> expect_rank(std::string_view op, std::string_view what, const NdArray& x, std::size_t rank) {
  if (x.shape.rank() != rank) return failf("{}: {} must have rank {}, got {}", op, what, rank, x.shape.to_string());
  return {};
}

// A linear map y[n, o] = sum_i W[o, i] x[n, i] + bias[o] over `rows` rows, with W and bias read at
// element offsets into their arrays (the stacked weights w_qkvg, w_ab hold several maps).
struct Linear {
  const NdArray& w;
  std::size_t w_at;
  const NdArray* bias;  // null: no bias
  std::size_t b_at;
  std::int64_t in, out;

  Vec apply(const Vec& x, std::int64_t rows) const {
    Vec y(idx(rows * out), 0.0);
    for (std::int64_t n = 0; n < rows; ++n)
      for (std::int64_t o = 0; o < out; ++o) {
        double sum = bias ? bias->data[b_at + idx(o)] : 0.0;
        for (std::int64_t i = 0; i < in; ++i) sum += w.data[w_at + idx(o * in + i)] * x[idx(n * in + i)];
        y[idx(n * out + o)] = sum;
      }
    return y;
  }
  // dx += dy W; dW += dy^T x; dbias += sum_n dy (grad arrays shaped like w and bias).
  void backward(const Vec& x, const Vec& dy, std::int64_t rows, Vec& dx, NdArray& dw, NdArray* dbias) const {
    for (std::int64_t n = 0; n < rows; ++n)
      for (std::int64_t o = 0; o < out; ++o) {
        const double g = dy[idx(n * out + o)];
        if (dbias) dbias->data[b_at + idx(o)] += g;
        for (std::int64_t i = 0; i < in; ++i) {
          dx[idx(n * in + i)] += g * w.data[w_at + idx(o * in + i)];
          dw.data[w_at + idx(o * in + i)] += g * x[idx(n * in + i)];
        }
      }
  }
};

// Copies rows of `channels` contiguous values starting at the given flat offsets into one matrix, and back.
Vec gather_rows(const NdArray& x, const std::vector<std::size_t>& rows, std::int64_t channels) {
  Vec out;
  out.reserve(rows.size() * idx(channels));
  for (std::size_t r : rows) out.insert(out.end(), x.data.begin() + static_cast<std::ptrdiff_t>(r),
                                        x.data.begin() + static_cast<std::ptrdiff_t>(r + idx(channels)));
  return out;
}
void scatter_add_rows(NdArray& x, const std::vector<std::size_t>& rows, std::int64_t channels, const Vec& values) {
  for (std::size_t n = 0; n < rows.size(); ++n)
    for (std::int64_t c = 0; c < channels; ++c) x.data[rows[n] + idx(c)] += values[n * idx(channels) + idx(c)];
}

// ---- Gated multi-head attention (Alg. 7, 8, 13, 14) ----------------------------------------------

// w_qkvg [4 h d c] (q, k, v, gate; only the gate has a bias, b_g [h d]), w_o [e h d], b_o [e].
struct GatedAttention {
  const NdArray &qkvg, &gate_bias, &out_w, &out_b;
  std::int64_t heads = 0, dim = 0, channels = 0, out = 0;
  bool adds_out_bias = true;

  std::int64_t hd() const { return heads * dim; }
  Linear projection(std::int64_t p) const {
    return {qkvg, idx(p * hd() * channels), p == 3 ? &gate_bias : nullptr, 0, channels, hd()};
  }
  Linear output() const { return {out_w, 0, adds_out_bias ? &out_b : nullptr, 0, hd(), out}; }
};

// Checks the weights at inputs [first, first + 4) (or with a pair-bias weight between b_g and w_o,
// which the caller checks) against activations with `channels` features.
Expected<GatedAttention> gated_attention(std::string_view op, const KernelContext& ctx, std::span<const NdArray> in,
                                         std::size_t first, std::size_t out_w_index, std::int64_t channels) {
  const NdArray &qkvg = in[first], &gate_bias = in[first + 1], &out_w = in[out_w_index], &out_b = in[out_w_index + 1];
  LOOM_RETURN_IF_ERROR(expect_rank(op, "w_qkvg", qkvg, 4));
  const std::int64_t heads = qkvg.shape[1], dim = qkvg.shape[2];
  LOOM_RETURN_IF_ERROR(expect_shape(op, "w_qkvg", qkvg, ir::Shape{4, heads, dim, channels}));
  LOOM_RETURN_IF_ERROR(expect_shape(op, "b_g", gate_bias, ir::Shape{heads, dim}));
  LOOM_RETURN_IF_ERROR(expect_rank(op, "w_o", out_w, 3));
  LOOM_RETURN_IF_ERROR(expect_shape(op, "w_o", out_w, ir::Shape{out_w.shape[0], heads, dim}));
  LOOM_RETURN_IF_ERROR(expect_shape(op, "b_o", out_b, ir::Shape{out_w.shape[0]}));
  return GatedAttention{qkvg, gate_bias, out_w, out_b, heads, dim, channels, out_w.shape[0],
                        offset_along(ctx, first, 1) == 0};
}

// Everything the backward needs of one sequence of L tokens.
struct AttentionState {
  std::int64_t length = 0;
  Vec x;                 // [L c]
  std::array<Vec, 4> proj;  // q, k, v, gate logits: [L h d]
  Vec gate;              // sigmoid of the gate logits
  Vec probs;             // [h L L]
  Vec mixed;             // sum_j a_ij v_j: [L h d]
  Vec gated;             // gate * mixed
};

// softmax_j(q_i . k_j / sqrt(d) + bias[h, i, j]) v_j, gated, then the output projection. `bias` is
// [h L L] or empty.
AttentionState attend(const GatedAttention& a, Vec x, const Vec& bias, std::int64_t length, Vec& out) {
  AttentionState s{.length = length, .x = std::move(x)};
  for (std::int64_t p = 0; p < 4; ++p) s.proj[idx(p)] = a.projection(p).apply(s.x, length);
  s.gate = s.proj[3];
  for (double& g : s.gate) g = sigmoid(g);
  s.probs.assign(idx(a.heads * length * length), 0.0);
  s.mixed.assign(idx(length * a.hd()), 0.0);
  const double scale = 1.0 / std::sqrt(static_cast<double>(a.dim));
  for (std::int64_t h = 0; h < a.heads; ++h)
    for (std::int64_t i = 0; i < length; ++i) {
      double* row = &s.probs[idx((h * length + i) * length)];
      double top = -INFINITY, total = 0;
      for (std::int64_t j = 0; j < length; ++j) {
        double logit = bias.empty() ? 0.0 : bias[idx((h * length + i) * length + j)];
        for (std::int64_t c = 0; c < a.dim; ++c)
          logit += scale * s.proj[0][idx((i * a.heads + h) * a.dim + c)] * s.proj[1][idx((j * a.heads + h) * a.dim + c)];
        row[j] = logit;
        top = std::max(top, logit);
      }
      for (std::int64_t j = 0; j < length; ++j) total += (row[j] = std::exp(row[j] - top));
      for (std::int64_t j = 0; j < length; ++j) {
        row[j] /= total;
        for (std::int64_t c = 0; c < a.dim; ++c)
          s.mixed[idx((i * a.heads + h) * a.dim + c)] += row[j] * s.proj[2][idx((j * a.heads + h) * a.dim + c)];
      }
    }
  s.gated = s.mixed;
  for (std::size_t i = 0; i < s.gated.size(); ++i) s.gated[i] *= s.gate[i];
  out = a.output().apply(s.gated, length);
  return s;
}

struct AttentionGrads {
  NdArray qkvg, gate_bias, out_w, out_b;
  explicit AttentionGrads(const GatedAttention& a)
      : qkvg(a.qkvg.shape), gate_bias(a.gate_bias.shape), out_w(a.out_w.shape), out_b(a.out_b.shape) {}
};

// Accumulates the weight gradients; returns dx [L c] and writes dbias [h L L] when bias was used.
Vec attend_backward(const GatedAttention& a, const AttentionState& s, const Vec& dout, AttentionGrads& grads,
                    Vec* dbias) {
  const std::int64_t length = s.length;
  Vec dgated(idx(length * a.hd()), 0.0);
  a.output().backward(s.gated, dout, length, dgated, grads.out_w, a.adds_out_bias ? &grads.out_b : nullptr);
  std::array<Vec, 4> dproj;
  for (Vec& d : dproj) d.assign(idx(length * a.hd()), 0.0);
  Vec dmixed(dgated.size());
  for (std::size_t i = 0; i < dgated.size(); ++i) {
    dmixed[i] = dgated[i] * s.gate[i];
    dproj[3][i] = dgated[i] * s.mixed[i] * s.gate[i] * (1 - s.gate[i]);
  }
  const double scale = 1.0 / std::sqrt(static_cast<double>(a.dim));
  for (std::int64_t h = 0; h < a.heads; ++h)
    for (std::int64_t i = 0; i < length; ++i) {
      const double* row = &s.probs[idx((h * length + i) * length)];
      const std::size_t qi = idx((i * a.heads + h) * a.dim);
      Vec dprob(idx(length), 0.0);
      double weighted = 0;
      for (std::int64_t j = 0; j < length; ++j) {
        const std::size_t vj = idx((j * a.heads + h) * a.dim);
        for (std::int64_t c = 0; c < a.dim; ++c) {
          dprob[idx(j)] += dmixed[qi + idx(c)] * s.proj[2][vj + idx(c)];
          dproj[2][vj + idx(c)] += row[j] * dmixed[qi + idx(c)];
        }
        weighted += row[j] * dprob[idx(j)];
      }
      for (std::int64_t j = 0; j < length; ++j) {
        const double dlogit = row[j] * (dprob[idx(j)] - weighted);
        if (dbias) (*dbias)[idx((h * length + i) * length + j)] += dlogit;
        const std::size_t kj = idx((j * a.heads + h) * a.dim);
        for (std::int64_t c = 0; c < a.dim; ++c) {
          dproj[0][qi + idx(c)] += scale * dlogit * s.proj[1][kj + idx(c)];
          dproj[1][kj + idx(c)] += scale * dlogit * s.proj[0][qi + idx(c)];
        }
      }
    }
  Vec dx(s.x.size(), 0.0);
  for (std::int64_t p = 0; p < 4; ++p)
    a.projection(p).backward(s.x, dproj[idx(p)], length, dx, grads.qkvg, p == 3 ? &grads.gate_bias : nullptr);
  return dx;
}

// The pair bias b[h, q, k] = sum_y w_bias[h, y] z[batch, q, k, y] over the L x L block of z;
// `transposed` reads z[batch, k, q] instead (triangle attention around the ending node).
Vec pair_bias(const NdArray& z, std::int64_t batch, const NdArray& w_bias, bool transposed) {
  const std::int64_t length = z.shape[1], channels = z.shape[3], heads = w_bias.shape[0];
  Vec bias(idx(heads * length * length), 0.0);
  for (std::int64_t h = 0; h < heads; ++h)
    for (std::int64_t q = 0; q < length; ++q)
      for (std::int64_t k = 0; k < length; ++k) {
        const std::size_t z_at = idx(((batch * length + (transposed ? k : q)) * length + (transposed ? q : k)) * channels);
        double sum = 0;
        for (std::int64_t y = 0; y < channels; ++y) sum += w_bias.data[idx(h * channels + y)] * z.data[z_at + idx(y)];
        bias[idx((h * length + q) * length + k)] = sum;
      }
  return bias;
}

void pair_bias_backward(const NdArray& z, std::int64_t batch, const NdArray& w_bias, bool transposed, const Vec& dbias,
                        NdArray& dz, NdArray& dw_bias) {
  const std::int64_t length = z.shape[1], channels = z.shape[3], heads = w_bias.shape[0];
  for (std::int64_t h = 0; h < heads; ++h)
    for (std::int64_t q = 0; q < length; ++q)
      for (std::int64_t k = 0; k < length; ++k) {
        const std::size_t z_at = idx(((batch * length + (transposed ? k : q)) * length + (transposed ? q : k)) * channels);
        const double g = dbias[idx((h * length + q) * length + k)];
        for (std::int64_t y = 0; y < channels; ++y) {
          dz.data[z_at + idx(y)] += g * w_bias.data[idx(h * channels + y)];
          dw_bias.data[idx(h * channels + y)] += g * z.data[z_at + idx(y)];
        }
      }
}

// The three gated attentions as one shape: activations x [b P Q c] attended along Q (rows of P) or
// along P (columns of Q), with an optional pair bias from `bias_source` [b L L y] (transposed or not).
struct AttentionLayout {
  std::string_view op;
  std::size_t x_input, bias_input, weights_input, bias_weight_input, out_w_input;  // bias_* = npos: none
  bool along_columns;    // attend along dim 1 of x (MSA columns, triangle ending node)
  bool transposed_bias;  // read the bias source as z[k, q]
};
constexpr std::size_t kNone = static_cast<std::size_t>(-1);

struct AttentionProblem {
  GatedAttention attention;
  std::int64_t batch, rows, cols, channels;  // x [batch rows cols channels]
  std::int64_t length, sequences;            // per batch: `sequences` sequences of `length` tokens
};

Expected<AttentionProblem> attention_problem(const AttentionLayout& layout, const KernelContext& ctx,
                                             std::span<const NdArray> in) {
  const std::size_t arity = layout.bias_input == kNone ? 5 : 7;
  LOOM_RETURN_IF_ERROR(expect_arity(in, arity, arity, layout.op));
  const NdArray& x = in[layout.x_input];
  LOOM_RETURN_IF_ERROR(expect_rank(layout.op, "the activations", x, 4));
  LOOM_ASSIGN_OR_RETURN(GatedAttention a, gated_attention(layout.op, ctx, in, layout.weights_input, layout.out_w_input,
                                                          x.shape[3]));
  AttentionProblem p{a, x.shape[0], x.shape[1], x.shape[2], x.shape[3], 0, 0};
  p.length = layout.along_columns ? p.rows : p.cols;
  p.sequences = layout.along_columns ? p.cols : p.rows;
  if (layout.bias_input != kNone) {
    const NdArray &z = in[layout.bias_input], &w_bias = in[layout.bias_weight_input];
    LOOM_RETURN_IF_ERROR(expect_rank(layout.op, "the pair bias source", z, 4));
    LOOM_RETURN_IF_ERROR(expect_shape(layout.op, "the pair bias source", z,
                                      ir::Shape{p.batch, p.length, p.length, z.shape[3]}));
    LOOM_RETURN_IF_ERROR(expect_shape(layout.op, "w_bias", w_bias, ir::Shape{a.heads, z.shape[3]}));
  }
  return p;
}

// Flat offsets of the rows of sequence `seq` of batch `b` in x (or the output, with `channels` = e).
std::vector<std::size_t> sequence_rows(const AttentionLayout& layout, const AttentionProblem& p, std::int64_t b,
                                       std::int64_t seq, std::int64_t channels) {
  std::vector<std::size_t> rows;
  for (std::int64_t t = 0; t < p.length; ++t) {
    const std::int64_t r = layout.along_columns ? t : seq, c = layout.along_columns ? seq : t;
    rows.push_back(idx(((b * p.rows + r) * p.cols + c) * channels));
  }
  return rows;
}

Tensors attention_forward(const AttentionLayout& layout, const KernelContext& ctx, std::span<const NdArray> in) {
  LOOM_ASSIGN_OR_RETURN(AttentionProblem p, attention_problem(layout, ctx, in));
  NdArray out(ir::Shape{p.batch, p.rows, p.cols, p.attention.out});
  for (std::int64_t b = 0; b < p.batch; ++b) {
    const Vec bias = layout.bias_input == kNone
                         ? Vec{}
                         : pair_bias(in[layout.bias_input], b, in[layout.bias_weight_input], layout.transposed_bias);
    for (std::int64_t seq = 0; seq < p.sequences; ++seq) {
      Vec y;
      attend(p.attention, gather_rows(in[layout.x_input], sequence_rows(layout, p, b, seq, p.channels), p.channels),
             bias, p.length, y);
      scatter_add_rows(out, sequence_rows(layout, p, b, seq, p.attention.out), p.attention.out, y);
    }
  }
  return std::vector<NdArray>{std::move(out)};
}

Tensors attention_backward(const AttentionLayout& layout, const KernelContext& ctx, std::span<const NdArray> in,
                           std::span<const NdArray> grad_out) {
  LOOM_ASSIGN_OR_RETURN(AttentionProblem p, attention_problem(layout, ctx, in));
  LOOM_RETURN_IF_ERROR(expect_arity(grad_out, 1, 1, layout.op));
  LOOM_RETURN_IF_ERROR(expect_shape(layout.op, "the output gradient", grad_out[0],
                                    ir::Shape{p.batch, p.rows, p.cols, p.attention.out}));
  std::vector<NdArray> grads(in.size());
  for (std::size_t i = 0; i < in.size(); ++i) grads[i] = NdArray(in[i].shape);
  AttentionGrads weights(p.attention);
  const bool has_bias = layout.bias_input != kNone;
  for (std::int64_t b = 0; b < p.batch; ++b) {
    const Vec bias =
        has_bias ? pair_bias(in[layout.bias_input], b, in[layout.bias_weight_input], layout.transposed_bias) : Vec{};
    Vec dbias(bias.size(), 0.0);
    for (std::int64_t seq = 0; seq < p.sequences; ++seq) {
      const std::vector<std::size_t> x_rows = sequence_rows(layout, p, b, seq, p.channels);
      Vec y;
      const AttentionState state = attend(p.attention, gather_rows(in[layout.x_input], x_rows, p.channels), bias,
                                          p.length, y);
      const Vec dy = gather_rows(grad_out[0], sequence_rows(layout, p, b, seq, p.attention.out), p.attention.out);
      const Vec dx = attend_backward(p.attention, state, dy, weights, has_bias ? &dbias : nullptr);
      scatter_add_rows(grads[layout.x_input], x_rows, p.channels, dx);
    }
    if (has_bias)
      pair_bias_backward(in[layout.bias_input], b, in[layout.bias_weight_input], layout.transposed_bias, dbias,
                         grads[layout.bias_input], grads[layout.bias_weight_input]);
  }
  grads[layout.weights_input] = std::move(weights.qkvg);
  grads[layout.weights_input + 1] = std::move(weights.gate_bias);
  grads[layout.out_w_input] = std::move(weights.out_w);
  grads[layout.out_w_input + 1] = std::move(weights.out_b);
  return grads;
}

Kernel attention_kernel(AttentionLayout layout) {
  return {[layout](const KernelContext& ctx, std::span<const NdArray> in) { return attention_forward(layout, ctx, in); },
          [layout](const KernelContext& ctx, std::span<const NdArray> in, std::span<const NdArray>,
                   std::span<const NdArray> grad_out) { return attention_backward(layout, ctx, in, grad_out); }};
}

// Triangle attention (Alg. 13 / 14): inputs z, z (bias source), w_qkvg, b_g, w_bias, w_o, b_o.
// Starting node: row i attends along j with bias z[j, k]; ending node: column j attends along i with
// bias z[k, i].
Expected<AttentionLayout> triangle_attention_layout(const KernelContext& ctx) {
  LOOM_ASSIGN_OR_RETURN(std::string mode, ir::get_string(ctx.attrs, "mode"));
  if (mode != "starting" && mode != "ending")
    return failf("triangle_attention: mode must be \"starting\" or \"ending\", got \"{}\"", mode);
  const bool ending = mode == "ending";
  return AttentionLayout{"triangle_attention", 0, 1, 2, 4, 5, ending, ending};
}

Kernel triangle_attention_kernel() {
  return {[](const KernelContext& ctx, std::span<const NdArray> in) -> Tensors {
            LOOM_ASSIGN_OR_RETURN(AttentionLayout layout, triangle_attention_layout(ctx));
            return attention_forward(layout, ctx, in);
          },
          [](const KernelContext& ctx, std::span<const NdArray> in, std::span<const NdArray>,
             std::span<const NdArray> grad_out) -> Tensors {
            LOOM_ASSIGN_OR_RETURN(AttentionLayout layout, triangle_attention_layout(ctx));
            return attention_backward(layout, ctx, in, grad_out);
          }};
}

// ---- Triangle multiplicative update (Alg. 11 / 12) ---------------------------------------------

// Inputs: z (left edges), z (right edges), z (gate), w_ab [4 ch cz] (a projection, a gate, b
// projection, b gate: OpenFold's linear_a_p, linear_a_g, linear_b_p, linear_b_g), b_ab [4 ch], ln_w,
// ln_b [ch], w_o [e ch], b_o [e], w_g [e cz], b_g [e].
//   a = sigmoid(a gate) * a projection (from input 0), b likewise (from input 1),
//   outgoing: p[i, j] = sum_k a[i, k] * b[j, k];  incoming: p[i, j] = sum_k a[k, i] * b[k, j],
//   out[i, j] = sigmoid(w_g z[i, j] + b_g) * (w_o LayerNorm(p[i, j]) + b_o)  (eps 1e-5, torch's default).
constexpr std::string_view kTriMul = "triangle_multiplication";
constexpr double kLayerNormEps = 1e-5;

struct TriMulProblem {
  bool incoming = false;
  std::int64_t batch = 0, left = 0, right = 0, inner = 0, channels = 0, hidden = 0, out = 0;  // i, j, k, cz, ch, e
  // Flat row (of `channels` values) of a[i, k] in input 0 and of b[j, k] in input 1.
  std::size_t a_row(std::int64_t b, std::int64_t i, std::int64_t k) const {
    return incoming ? idx((b * inner + k) * left + i) : idx((b * left + i) * inner + k);
  }
  std::size_t b_row(std::int64_t b, std::int64_t j, std::int64_t k) const {
    return incoming ? idx((b * inner + k) * right + j) : idx((b * right + j) * inner + k);
  }
};

Expected<TriMulProblem> trimul_problem(const KernelContext& ctx, std::span<const NdArray> in) {
  LOOM_RETURN_IF_ERROR(expect_arity(in, 11, 11, kTriMul));
  LOOM_ASSIGN_OR_RETURN(std::string mode, ir::get_string(ctx.attrs, "mode"));
  if (mode != "outgoing" && mode != "incoming")
    return failf("{}: mode must be \"outgoing\" or \"incoming\", got \"{}\"", kTriMul, mode);
  for (std::size_t i = 0; i < 3; ++i) LOOM_RETURN_IF_ERROR(expect_rank(kTriMul, "a pair input", in[i], 4));
  LOOM_RETURN_IF_ERROR(expect_rank(kTriMul, "w_ab", in[3], 3));
  LOOM_RETURN_IF_ERROR(expect_rank(kTriMul, "w_o", in[7], 2));
  TriMulProblem p{.incoming = mode == "incoming", .batch = in[0].shape[0], .channels = in[0].shape[3],
                  .hidden = in[3].shape[1], .out = in[7].shape[0]};
  const ir::Shape &za = in[0].shape, &zb = in[1].shape;
  p.left = p.incoming ? za[2] : za[1];
  p.inner = p.incoming ? za[1] : za[2];
  p.right = p.incoming ? zb[2] : zb[1];
  const ir::Shape expected_b = p.incoming ? ir::Shape{p.batch, p.inner, p.right, p.channels}
                                          : ir::Shape{p.batch, p.right, p.inner, p.channels};
  LOOM_RETURN_IF_ERROR(expect_shape(kTriMul, "the right edges (input 1)", in[1], expected_b));
  LOOM_RETURN_IF_ERROR(expect_shape(kTriMul, "the gate input (input 2)", in[2],
                                    ir::Shape{p.batch, p.left, p.right, p.channels}));
  LOOM_RETURN_IF_ERROR(expect_shape(kTriMul, "w_ab", in[3], ir::Shape{4, p.hidden, p.channels}));
  LOOM_RETURN_IF_ERROR(expect_shape(kTriMul, "b_ab", in[4], ir::Shape{4, p.hidden}));
  LOOM_RETURN_IF_ERROR(expect_shape(kTriMul, "ln_w", in[5], ir::Shape{p.hidden}));
  LOOM_RETURN_IF_ERROR(expect_shape(kTriMul, "ln_b", in[6], ir::Shape{p.hidden}));
  LOOM_RETURN_IF_ERROR(expect_shape(kTriMul, "w_o", in[7], ir::Shape{p.out, p.hidden}));
  LOOM_RETURN_IF_ERROR(expect_shape(kTriMul, "b_o", in[8], ir::Shape{p.out}));
  LOOM_RETURN_IF_ERROR(expect_shape(kTriMul, "w_g", in[9], ir::Shape{p.out, p.channels}));
  LOOM_RETURN_IF_ERROR(expect_shape(kTriMul, "b_g", in[10], ir::Shape{p.out}));
  return p;
}

// A gated edge projection over every row of z: value = sigmoid(W_gate z + b) * (W_proj z + b).
struct GatedEdges {
  Vec proj, gate, value;  // [rows ch]
};
GatedEdges gated_edges(std::span<const NdArray> in, const TriMulProblem& p, std::int64_t first, const NdArray& z) {
  const std::int64_t rows = z.numel() / p.channels, size = p.hidden * p.channels;
  const Linear proj{in[3], idx(first * size), &in[4], idx(first * p.hidden), p.channels, p.hidden};
  const Linear gate{in[3], idx((first + 1) * size), &in[4], idx((first + 1) * p.hidden), p.channels, p.hidden};
  GatedEdges e{proj.apply(z.data, rows), gate.apply(z.data, rows), {}};
  e.value = e.proj;
  for (std::size_t i = 0; i < e.value.size(); ++i) e.value[i] *= sigmoid(e.gate[i]);
  return e;
}
void gated_edges_backward(std::span<const NdArray> in, const TriMulProblem& p, std::int64_t first, const NdArray& z,
                          const GatedEdges& e, const Vec& dvalue, NdArray& dz, std::vector<NdArray>& grads) {
  const std::int64_t rows = z.numel() / p.channels, size = p.hidden * p.channels;
  const Linear proj{in[3], idx(first * size), &in[4], idx(first * p.hidden), p.channels, p.hidden};
  const Linear gate{in[3], idx((first + 1) * size), &in[4], idx((first + 1) * p.hidden), p.channels, p.hidden};
  Vec dproj(dvalue.size()), dgate(dvalue.size());
  for (std::size_t i = 0; i < dvalue.size(); ++i) {
    const double s = sigmoid(e.gate[i]);
    dproj[i] = dvalue[i] * s;
    dgate[i] = dvalue[i] * e.proj[i] * s * (1 - s);
  }
  proj.backward(z.data, dproj, rows, dz.data, grads[3], &grads[4]);
  gate.backward(z.data, dgate, rows, dz.data, grads[3], &grads[4]);
}

// Everything after the edge projections, per output pair (i, j): the product, its layer norm, the
// output projection and the output gate.
struct TriMulState {
  GatedEdges a, b;
  Vec product, normed, mean, inv_std;  // [pairs ch], [pairs ch], [pairs], [pairs]
  Vec out_gate, out_value;             // [pairs e]: sigmoid gate, w_o normed + b_o
};

TriMulState trimul_forward_state(std::span<const NdArray> in, const TriMulProblem& p) {
  TriMulState s{gated_edges(in, p, 0, in[0]), gated_edges(in, p, 2, in[1]), {}, {}, {}, {}, {}, {}};
  const std::int64_t pairs = p.batch * p.left * p.right;
  s.product.assign(idx(pairs * p.hidden), 0.0);
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t i = 0; i < p.left; ++i)
      for (std::int64_t j = 0; j < p.right; ++j)
        for (std::int64_t k = 0; k < p.inner; ++k)
          for (std::int64_t c = 0; c < p.hidden; ++c)
            s.product[idx(((b * p.left + i) * p.right + j) * p.hidden + c)] +=
                s.a.value[p.a_row(b, i, k) * idx(p.hidden) + idx(c)] * s.b.value[p.b_row(b, j, k) * idx(p.hidden) + idx(c)];
  s.normed.assign(s.product.size(), 0.0);
  s.mean.assign(idx(pairs), 0.0);
  s.inv_std.assign(idx(pairs), 0.0);
  for (std::int64_t n = 0; n < pairs; ++n) {
    const double* x = &s.product[idx(n * p.hidden)];
    double mean = 0, var = 0;
    for (std::int64_t c = 0; c < p.hidden; ++c) mean += x[c];
    mean /= static_cast<double>(p.hidden);
    for (std::int64_t c = 0; c < p.hidden; ++c) var += (x[c] - mean) * (x[c] - mean);
    s.mean[idx(n)] = mean;
    s.inv_std[idx(n)] = 1.0 / std::sqrt(var / static_cast<double>(p.hidden) + kLayerNormEps);
    for (std::int64_t c = 0; c < p.hidden; ++c)
      s.normed[idx(n * p.hidden + c)] = (x[c] - mean) * s.inv_std[idx(n)] * in[5].data[idx(c)] + in[6].data[idx(c)];
  }
  s.out_value = Linear{in[7], 0, &in[8], 0, p.hidden, p.out}.apply(s.normed, pairs);
  s.out_gate = Linear{in[9], 0, &in[10], 0, p.channels, p.out}.apply(in[2].data, pairs);
  for (double& g : s.out_gate) g = sigmoid(g);
  return s;
}

Tensors trimul_forward(const KernelContext& ctx, std::span<const NdArray> in) {
  LOOM_ASSIGN_OR_RETURN(TriMulProblem p, trimul_problem(ctx, in));
  const TriMulState s = trimul_forward_state(in, p);
  NdArray out(ir::Shape{p.batch, p.left, p.right, p.out});
  for (std::size_t i = 0; i < out.data.size(); ++i) out.data[i] = s.out_gate[i] * s.out_value[i];
  return std::vector<NdArray>{std::move(out)};
}

Tensors trimul_backward(const KernelContext& ctx, std::span<const NdArray> in, std::span<const NdArray>,
                        std::span<const NdArray> grad_out) {
  LOOM_ASSIGN_OR_RETURN(TriMulProblem p, trimul_problem(ctx, in));
  LOOM_RETURN_IF_ERROR(expect_arity(grad_out, 1, 1, kTriMul));
  LOOM_RETURN_IF_ERROR(expect_shape(kTriMul, "the output gradient", grad_out[0],
                                    ir::Shape{p.batch, p.left, p.right, p.out}));
  const TriMulState s = trimul_forward_state(in, p);
  std::vector<NdArray> grads(in.size());
  for (std::size_t i = 0; i < in.size(); ++i) grads[i] = NdArray(in[i].shape);
  const std::int64_t pairs = p.batch * p.left * p.right;
  const Vec& dout = grad_out[0].data;
  Vec dvalue(dout.size()), dgate(dout.size());
  for (std::size_t i = 0; i < dout.size(); ++i) {
    dvalue[i] = dout[i] * s.out_gate[i];
    dgate[i] = dout[i] * s.out_value[i] * s.out_gate[i] * (1 - s.out_gate[i]);
  }
  Linear{in[9], 0, &in[10], 0, p.channels, p.out}.backward(in[2].data, dgate, pairs, grads[2].data, grads[9], &grads[10]);
  Vec dnormed(s.normed.size(), 0.0);
  Linear{in[7], 0, &in[8], 0, p.hidden, p.out}.backward(s.normed, dvalue, pairs, dnormed, grads[7], &grads[8]);
  // Layer norm: with xhat = (x - mean) inv_std and dxhat = dnormed * ln_w,
  // dx = inv_std (dxhat - mean(dxhat) - xhat mean(dxhat xhat)).
  Vec dproduct(s.product.size(), 0.0);
  const double width = static_cast<double>(p.hidden);
  for (std::int64_t n = 0; n < pairs; ++n) {
    double mean_d = 0, mean_dx = 0;
    Vec xhat(idx(p.hidden)), dxhat(idx(p.hidden));
    for (std::int64_t c = 0; c < p.hidden; ++c) {
      const std::size_t at = idx(n * p.hidden + c);
      xhat[idx(c)] = (s.product[at] - s.mean[idx(n)]) * s.inv_std[idx(n)];
      dxhat[idx(c)] = dnormed[at] * in[5].data[idx(c)];
      grads[5].data[idx(c)] += dnormed[at] * xhat[idx(c)];
      grads[6].data[idx(c)] += dnormed[at];
      mean_d += dxhat[idx(c)] / width;
      mean_dx += dxhat[idx(c)] * xhat[idx(c)] / width;
    }
    for (std::int64_t c = 0; c < p.hidden; ++c)
      dproduct[idx(n * p.hidden + c)] = s.inv_std[idx(n)] * (dxhat[idx(c)] - mean_d - xhat[idx(c)] * mean_dx);
  }
  Vec da(s.a.value.size(), 0.0), db(s.b.value.size(), 0.0);
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t i = 0; i < p.left; ++i)
      for (std::int64_t j = 0; j < p.right; ++j)
        for (std::int64_t k = 0; k < p.inner; ++k)
          for (std::int64_t c = 0; c < p.hidden; ++c) {
            const double g = dproduct[idx(((b * p.left + i) * p.right + j) * p.hidden + c)];
            const std::size_t a_at = p.a_row(b, i, k) * idx(p.hidden) + idx(c);
            const std::size_t b_at = p.b_row(b, j, k) * idx(p.hidden) + idx(c);
            da[a_at] += g * s.b.value[b_at];
            db[b_at] += g * s.a.value[a_at];
          }
  gated_edges_backward(in, p, 0, in[0], s.a, da, grads[0], grads);
  gated_edges_backward(in, p, 2, in[1], s.b, db, grads[1], grads);
  return grads;
}

// ---- Outer product mean (Alg. 10) ----------------------------------------------------------------

// Inputs: m (left), m (right), w_ab [2 p cm], b_ab [2 p], w_o [e p*p], b_o [e].
//   a[s, i] = W_a m[s, i] + b_a,  b[s, j] = W_b m[s, j] + b_b,
//   out[i, j] = w_o flatten(mean_s a[s, i] (x) b[s, j]) + b_o, flattened (p, q) row-major.
// The mean divides by the FullTensor's sequence count, so a split along s leaves partial sums.
constexpr std::string_view kOuter = "outer_product_mean";

struct OuterProblem {
  std::int64_t batch = 0, seqs = 0, left = 0, right = 0, channels = 0, hidden = 0, out = 0;
  double inv_seqs = 1;
  bool adds_out_bias = true;
  Linear a_proj(std::span<const NdArray> in) const { return {in[2], 0, &in[3], 0, channels, hidden}; }
  Linear b_proj(std::span<const NdArray> in) const {
    return {in[2], idx(hidden * channels), &in[3], idx(hidden), channels, hidden};
  }
  Linear output(std::span<const NdArray> in) const {
    return {in[4], 0, adds_out_bias ? &in[5] : nullptr, 0, hidden * hidden, out};
  }
};

Expected<OuterProblem> outer_problem(const KernelContext& ctx, std::span<const NdArray> in) {
  LOOM_RETURN_IF_ERROR(expect_arity(in, 6, 6, kOuter));
  LOOM_RETURN_IF_ERROR(expect_rank(kOuter, "m (left)", in[0], 4));
  LOOM_RETURN_IF_ERROR(expect_rank(kOuter, "w_ab", in[2], 3));
  LOOM_RETURN_IF_ERROR(expect_rank(kOuter, "w_o", in[4], 2));
  const ir::Shape& m = in[0].shape;
  OuterProblem p{.batch = m[0], .seqs = m[1], .left = m[2], .right = in[1].shape.rank() == 4 ? in[1].shape[2] : 0,
                 .channels = m[3], .hidden = in[2].shape[1], .out = in[4].shape[0]};
  LOOM_RETURN_IF_ERROR(expect_shape(kOuter, "m (right)", in[1], ir::Shape{p.batch, p.seqs, p.right, p.channels}));
  LOOM_RETURN_IF_ERROR(expect_shape(kOuter, "w_ab", in[2], ir::Shape{2, p.hidden, p.channels}));
  LOOM_RETURN_IF_ERROR(expect_shape(kOuter, "b_ab", in[3], ir::Shape{2, p.hidden}));
  LOOM_RETURN_IF_ERROR(expect_shape(kOuter, "w_o", in[4], ir::Shape{p.out, p.hidden * p.hidden}));
  LOOM_RETURN_IF_ERROR(expect_shape(kOuter, "b_o", in[5], ir::Shape{p.out}));
  const bool split = !ctx.input_full_shapes.empty() && ctx.input_full_shapes[0].rank() == 4;
  p.inv_seqs = 1.0 / static_cast<double>(split ? ctx.input_full_shapes[0][1] : p.seqs);
  p.adds_out_bias = offset_along(ctx, 0, 1) == 0;
  return p;
}

// o[b, i, j, p q] = inv_seqs sum_s a[b, s, i, p] b[b, s, j, q].
Vec outer_mean(const OuterProblem& p, const Vec& a, const Vec& b) {
  const std::int64_t h = p.hidden;
  Vec o(idx(p.batch * p.left * p.right * h * h), 0.0);
  for (std::int64_t n = 0; n < p.batch; ++n)
    for (std::int64_t s = 0; s < p.seqs; ++s)
      for (std::int64_t i = 0; i < p.left; ++i)
        for (std::int64_t j = 0; j < p.right; ++j)
          for (std::int64_t x = 0; x < h; ++x)
            for (std::int64_t y = 0; y < h; ++y)
              o[idx((((n * p.left + i) * p.right + j) * h + x) * h + y)] +=
                  p.inv_seqs * a[idx(((n * p.seqs + s) * p.left + i) * h + x)] * b[idx(((n * p.seqs + s) * p.right + j) * h + y)];
  return o;
}

Tensors outer_forward(const KernelContext& ctx, std::span<const NdArray> in) {
  LOOM_ASSIGN_OR_RETURN(OuterProblem p, outer_problem(ctx, in));
  const Vec a = p.a_proj(in).apply(in[0].data, in[0].numel() / p.channels);
  const Vec b = p.b_proj(in).apply(in[1].data, in[1].numel() / p.channels);
  NdArray out(ir::Shape{p.batch, p.left, p.right, p.out},
              p.output(in).apply(outer_mean(p, a, b), p.batch * p.left * p.right));
  return std::vector<NdArray>{std::move(out)};
}

Tensors outer_backward(const KernelContext& ctx, std::span<const NdArray> in, std::span<const NdArray>,
                       std::span<const NdArray> grad_out) {
  LOOM_ASSIGN_OR_RETURN(OuterProblem p, outer_problem(ctx, in));
  LOOM_RETURN_IF_ERROR(expect_arity(grad_out, 1, 1, kOuter));
  LOOM_RETURN_IF_ERROR(expect_shape(kOuter, "the output gradient", grad_out[0],
                                    ir::Shape{p.batch, p.left, p.right, p.out}));
  std::vector<NdArray> grads(in.size());
  for (std::size_t i = 0; i < in.size(); ++i) grads[i] = NdArray(in[i].shape);
  const std::int64_t a_rows = in[0].numel() / p.channels, b_rows = in[1].numel() / p.channels, h = p.hidden;
  const Vec a = p.a_proj(in).apply(in[0].data, a_rows);
  const Vec b = p.b_proj(in).apply(in[1].data, b_rows);
  Vec dmean(idx(p.batch * p.left * p.right * h * h), 0.0);
  p.output(in).backward(outer_mean(p, a, b), grad_out[0].data, p.batch * p.left * p.right, dmean, grads[4],
                        p.adds_out_bias ? &grads[5] : nullptr);
  Vec da(a.size(), 0.0), db(b.size(), 0.0);
  for (std::int64_t n = 0; n < p.batch; ++n)
    for (std::int64_t s = 0; s < p.seqs; ++s)
      for (std::int64_t i = 0; i < p.left; ++i)
        for (std::int64_t j = 0; j < p.right; ++j)
          for (std::int64_t x = 0; x < h; ++x)
            for (std::int64_t y = 0; y < h; ++y) {
              const double g = p.inv_seqs * dmean[idx((((n * p.left + i) * p.right + j) * h + x) * h + y)];
              const std::size_t a_at = idx(((n * p.seqs + s) * p.left + i) * h + x);
              const std::size_t b_at = idx(((n * p.seqs + s) * p.right + j) * h + y);
              da[a_at] += g * b[b_at];
              db[b_at] += g * a[a_at];
            }
  p.a_proj(in).backward(in[0].data, da, a_rows, grads[0].data, grads[2], &grads[3]);
  p.b_proj(in).backward(in[1].data, db, b_rows, grads[1].data, grads[2], &grads[3]);
  return grads;
}

// ---- Recycling --------------------------------------------------------------------------------------

// Identity; the op is not differentiable, so it has no backward kernel.
Tensors recycle_forward(const KernelContext&, std::span<const NdArray> in) {
  LOOM_RETURN_IF_ERROR(expect_arity(in, 1, 1, "recycle_detach"));
  return std::vector<NdArray>{in[0]};
}


}  // namespace

void register_alphafold_kernels(KernelRegistry& r) {
  // Alg. 7: m [b s r cm], z [b r r cz], w_qkvg, b_g, w_bias, w_o, b_o; each MSA row attends along r,
  // biased by w_bias z[i, j].
  r.add("msa_row_attention_with_pair_bias",
        attention_kernel({"msa_row_attention_with_pair_bias", 0, 1, 2, 4, 5, false, false}));
  // Alg. 8: m, w_qkvg, b_g, w_o, b_o; each residue column attends along s.
  r.add("msa_column_attention", attention_kernel({"msa_column_attention", 0, kNone, 1, kNone, 3, true, false}));
  r.add("triangle_attention", triangle_attention_kernel());
  r.add("triangle_multiplication", {trimul_forward, trimul_backward});
  r.add("outer_product_mean", {outer_forward, outer_backward});
  r.add("recycle_detach", {recycle_forward, nullptr});
}

}  // namespace loom::verify
