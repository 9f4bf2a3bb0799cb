// Reference kernels of the attention family: fused scaled dot-product attention, the causal mask of
// eager attention and rotary embedding. All are position-dependent, so they read their slice's offsets from the KernelContext:
// a split along the query or key length then computes exactly the single-device values.
//
// Backward kernels receive the same KernelContext as the forward (offsets of the forward op's
// inputs and outputs).
#include <array>
#include <cmath>
#include <limits>

#include "loom/verify/kernel_families.h"
#include "loom/verify/ndarray_ops.h"

namespace loom::verify {
namespace {

constexpr std::string_view kSdpa = "scaled_dot_product_attention";
constexpr std::string_view kRotary = "rotary_embedding";
constexpr std::string_view kCausalMask = "causal_mask";

// Offset of `tensor` along `dim` in its FullTensor; absent entries mean the slice starts at 0.
std::int64_t offset_along(std::span<const std::vector<std::int64_t>> offsets, std::size_t tensor, std::size_t dim) {
  if (tensor >= offsets.size() || dim >= offsets[tensor].size()) return 0;
  return offsets[tensor][dim];
}

// Everything the forward and backward share: sizes, attrs, the global positions of the slice and how
// the optional bias broadcasts against the logits [b hq s t].
struct SdpaProblem {
  std::int64_t batch = 0, q_heads = 0, kv_heads = 0, s = 0, t = 0, d = 0, e = 0;
  double scale = 1.0;
  bool causal = false;
  std::int64_t query_offset = 0, key_offset = 0;
  bool has_bias = false;
  std::array<std::int64_t, 4> bias_strides{};  // over [b hq s t]; 0 on broadcast (size-1 or missing) dims

  std::int64_t kv_head(std::int64_t h) const { return h / (q_heads / kv_heads); }
  std::int64_t bias_at(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) const {
    return b * bias_strides[0] + h * bias_strides[1] + i * bias_strides[2] + j * bias_strides[3];
  }
};

Expected<SdpaProblem> sdpa_problem(const KernelContext& ctx, std::span<const NdArray> in) {
  LOOM_RETURN_IF_ERROR(expect_arity(in, 3, 4, kSdpa));
  for (std::size_t i = 0; i < 3; ++i)
    if (in[i].shape.rank() != 4)
      return failf("{}: input {} must be rank 4, got {}", kSdpa, i, in[i].shape.to_string());
  const ir::Shape &q = in[0].shape, &k = in[1].shape, &v = in[2].shape;
  SdpaProblem p{.batch = q[0], .q_heads = q[1], .kv_heads = k[1], .s = q[2], .t = k[2], .d = q[3], .e = v[3]};
  if (k[0] != p.batch || v[0] != p.batch || v[1] != p.kv_heads || v[2] != p.t || k[3] != p.d)
    return failf("{}: shapes q {}, k {}, v {} do not fit [b hq s d], [b hk t d], [b hk t e]", kSdpa, q.to_string(),
                 k.to_string(), v.to_string());
  if (p.kv_heads == 0 || p.q_heads % p.kv_heads != 0)
    return failf("{}: {} query heads are not a multiple of {} key/value heads", kSdpa, p.q_heads, p.kv_heads);
  LOOM_ASSIGN_OR_RETURN(p.scale, ir::get_real_or(ctx.attrs, "scale", 1.0 / std::sqrt(static_cast<double>(p.d))));
  LOOM_ASSIGN_OR_RETURN(p.causal, ir::get_bool_or(ctx.attrs, "causal", false));
  // Dropout is treated as 0 (torch's eval mode): the reference checks that a plan preserves the
  // program's meaning, and a random mask on attention probabilities adds nothing to that check.
  LOOM_ASSIGN_OR_RETURN(double dropout, ir::get_real_or(ctx.attrs, "dropout", 0.0));
  if (dropout < 0 || dropout >= 1) return failf("{}: dropout {} is outside [0, 1)", kSdpa, dropout);
  // The query's s offset equals the output's (they share s); prefer the output's as documented.
  p.query_offset = ctx.output_offsets.empty() ? offset_along(ctx.input_offsets, 0, 2)
                                              : offset_along(ctx.output_offsets, 0, 2);
  p.key_offset = offset_along(ctx.input_offsets, 1, 2);
  if (in.size() == 4) {
    const ir::Shape& bias = in[3].shape;
    if (bias.rank() != 3 && bias.rank() != 4)
      return failf("{}: bias must be [hq s t] or [b hq s t], got {}", kSdpa, bias.to_string());
    const std::array<std::int64_t, 4> logits = {p.batch, p.q_heads, p.s, p.t};
    const std::vector<std::int64_t> strides = strides_of(bias);
    for (std::size_t k_dim = 0; k_dim < bias.rank(); ++k_dim) {
      const std::size_t axis = 4 - bias.rank() + k_dim;
      if (bias[k_dim] != logits[axis] && bias[k_dim] != 1)
        return failf("{}: bias {} does not broadcast to the logits [{}, {}, {}, {}]", kSdpa, bias.to_string(),
                     logits[0], logits[1], logits[2], logits[3]);
      p.bias_strides[axis] = bias[k_dim] == 1 ? 0 : strides[k_dim];
    }
    p.has_bias = true;
  }
  return p;
}

// Softmax probabilities of one query row (b, h, i) over the t keys. Masked keys get 0; a row with
// every key masked gets all zeros (flash-attention's convention; torch would give NaN).
std::vector<double> row_probabilities(const SdpaProblem& p, std::span<const NdArray> in, std::int64_t b,
                                      std::int64_t h, std::int64_t i) {
  const NdArray &q = in[0], &k = in[1];
  const std::int64_t kh = p.kv_head(h);
  const double* q_row = &q.data[static_cast<std::size_t>(((b * p.q_heads + h) * p.s + i) * p.d)];
  std::vector<double> prob(static_cast<std::size_t>(p.t), 0.0);
  std::vector<bool> visible(static_cast<std::size_t>(p.t), true);
  double max_logit = -std::numeric_limits<double>::infinity();
  for (std::int64_t j = 0; j < p.t; ++j) {
    // torch's is_causal: key j is visible to query i when j <= i, in global positions.
    if (p.causal && p.key_offset + j > p.query_offset + i) {
      visible[static_cast<std::size_t>(j)] = false;
      continue;
    }
    const double* k_row = &k.data[static_cast<std::size_t>(((b * p.kv_heads + kh) * p.t + j) * p.d)];
    double dot = 0;
    for (std::int64_t c = 0; c < p.d; ++c) dot += q_row[c] * k_row[c];
    double logit = p.scale * dot;
    if (p.has_bias) logit += in[3].data[static_cast<std::size_t>(p.bias_at(b, h, i, j))];
    prob[static_cast<std::size_t>(j)] = logit;
    max_logit = std::max(max_logit, logit);
  }
  double total = 0;
  for (std::size_t j = 0; j < prob.size(); ++j) {
    prob[j] = visible[j] ? std::exp(prob[j] - max_logit) : 0.0;
    total += prob[j];
  }
  if (total > 0)
    for (double& x : prob) x /= total;
  return prob;
}

Expected<std::vector<NdArray>> sdpa_forward(const KernelContext& ctx, std::span<const NdArray> in) {
  LOOM_ASSIGN_OR_RETURN(SdpaProblem p, sdpa_problem(ctx, in));
  NdArray out(ir::Shape{p.batch, p.q_heads, p.s, p.e});
  const NdArray& v = in[2];
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t h = 0; h < p.q_heads; ++h)
      for (std::int64_t i = 0; i < p.s; ++i) {
        const std::vector<double> prob = row_probabilities(p, in, b, h, i);
        double* o_row = &out.data[static_cast<std::size_t>(((b * p.q_heads + h) * p.s + i) * p.e)];
        for (std::int64_t j = 0; j < p.t; ++j) {
          const double* v_row = &v.data[static_cast<std::size_t>(((b * p.kv_heads + p.kv_head(h)) * p.t + j) * p.e)];
          for (std::int64_t c = 0; c < p.e; ++c) o_row[c] += prob[static_cast<std::size_t>(j)] * v_row[c];
        }
      }
  return std::vector<NdArray>{std::move(out)};
}

// Per row: dV += P^T dO, dP = dO V^T, dS = P (dP - <P, dP>), dQ = scale dS K, dK += scale dS^T Q,
// dBias += dS (summed over the bias's broadcast dims through its zero strides).
Expected<std::vector<NdArray>> sdpa_backward(const KernelContext& ctx, std::span<const NdArray> in,
                                             std::span<const NdArray>, std::span<const NdArray> grad_out) {
  LOOM_ASSIGN_OR_RETURN(SdpaProblem p, sdpa_problem(ctx, in));
  if (grad_out.size() != 1 || grad_out[0].shape != ir::Shape{p.batch, p.q_heads, p.s, p.e})
    return failf("{}: backward needs one output gradient [b hq s e]", kSdpa);
  const NdArray &q = in[0], &k = in[1], &v = in[2], &dout = grad_out[0];
  std::vector<NdArray> grads = {NdArray(q.shape), NdArray(k.shape), NdArray(v.shape)};
  if (p.has_bias) grads.emplace_back(in[3].shape);
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t h = 0; h < p.q_heads; ++h)
      for (std::int64_t i = 0; i < p.s; ++i) {
        const std::vector<double> prob = row_probabilities(p, in, b, h, i);
        const std::int64_t kv_base = (b * p.kv_heads + p.kv_head(h)) * p.t;
        const std::size_t q_at = static_cast<std::size_t>(((b * p.q_heads + h) * p.s + i) * p.d);
        const double* do_row = &dout.data[static_cast<std::size_t>(((b * p.q_heads + h) * p.s + i) * p.e)];
        std::vector<double> dprob(prob.size(), 0.0);
        double weighted = 0;
        for (std::int64_t j = 0; j < p.t; ++j) {
          const std::size_t v_at = static_cast<std::size_t>((kv_base + j) * p.e);
          const double pj = prob[static_cast<std::size_t>(j)];
          for (std::int64_t c = 0; c < p.e; ++c) {
            dprob[static_cast<std::size_t>(j)] += do_row[c] * v.data[v_at + static_cast<std::size_t>(c)];
            grads[2].data[v_at + static_cast<std::size_t>(c)] += pj * do_row[c];
          }
          weighted += pj * dprob[static_cast<std::size_t>(j)];
        }
        for (std::int64_t j = 0; j < p.t; ++j) {
          const double ds = prob[static_cast<std::size_t>(j)] * (dprob[static_cast<std::size_t>(j)] - weighted);
          if (ds == 0) continue;
          const std::size_t k_at = static_cast<std::size_t>((kv_base + j) * p.d);
          for (std::int64_t c = 0; c < p.d; ++c) {
            grads[0].data[q_at + static_cast<std::size_t>(c)] += p.scale * ds * k.data[k_at + static_cast<std::size_t>(c)];
            grads[1].data[k_at + static_cast<std::size_t>(c)] += p.scale * ds * q.data[q_at + static_cast<std::size_t>(c)];
          }
          if (p.has_bias) grads[3].data[static_cast<std::size_t>(p.bias_at(b, h, i, j))] += ds;
        }
      }
  return grads;
}

// HF LLaMA's rotate-half convention: element c < d/2 pairs with c + d/2, both rotated by the angle
// pos * base^(-2c/d):  out_c = x_c cos - x_{c+d/2} sin,  out_{c+d/2} = x_{c+d/2} cos + x_c sin.
// `direction` -1 applies the inverse (transpose) rotation, which is the backward.
Expected<NdArray> rotate(const KernelContext& ctx, const NdArray& x, double direction) {
  if (x.shape.rank() != 4) return failf("{}: x must be [b h s d], got {}", kRotary, x.shape.to_string());
  const std::int64_t heads = x.shape[0] * x.shape[1], s = x.shape[2], d = x.shape[3], half = d / 2;
  if (d % 2 != 0) return failf("{}: head dim {} is odd", kRotary, d);
  LOOM_ASSIGN_OR_RETURN(double base, ir::get_real_or(ctx.attrs, "base", 10000.0));
  if (base <= 0) return failf("{}: base {} must be positive", kRotary, base);
  const std::int64_t position_offset = offset_along(ctx.input_offsets, 0, 2);
  NdArray out(x.shape);
  for (std::int64_t row = 0; row < heads; ++row)
    for (std::int64_t i = 0; i < s; ++i) {
      const double position = static_cast<double>(position_offset + i);
      const std::size_t at = static_cast<std::size_t>((row * s + i) * d);
      for (std::int64_t c = 0; c < half; ++c) {
        const double angle = position * std::pow(base, -2.0 * static_cast<double>(c) / static_cast<double>(d));
        const double cos = std::cos(angle), sin = direction * std::sin(angle);
        const std::size_t lo = at + static_cast<std::size_t>(c), hi = lo + static_cast<std::size_t>(half);
        out.data[lo] = x.data[lo] * cos - x.data[hi] * sin;
        out.data[hi] = x.data[hi] * cos + x.data[lo] * sin;
      }
    }
  return out;
}

Expected<std::vector<NdArray>> rotary_forward(const KernelContext& ctx, std::span<const NdArray> in) {
  LOOM_RETURN_IF_ERROR(expect_arity(in, 1, 1, kRotary));
  LOOM_ASSIGN_OR_RETURN(NdArray out, rotate(ctx, in[0], 1.0));
  return std::vector<NdArray>{std::move(out)};
}

// Reads only the output gradient: the op does not save its input.
Expected<std::vector<NdArray>> rotary_backward(const KernelContext& ctx, std::span<const NdArray>,
                                               std::span<const NdArray>, std::span<const NdArray> grad_out) {
  if (grad_out.size() != 1) return failf("{}: backward needs one output gradient, got {}", kRotary, grad_out.size());
  LOOM_ASSIGN_OR_RETURN(NdArray grad, rotate(ctx, grad_out[0], -1.0));
  return std::vector<NdArray>{std::move(grad)};
}

// x [..., s, t] with every element whose key j (global) comes after its query i (global) set to `fill`:
// the forward masks the scores with kMaskedScore, the backward zeroes their gradients.
constexpr double kMaskedScore = -10000.0;  // src/ops/attention.cc, causal_mask

Expected<NdArray> mask_after_query(const KernelContext& ctx, const NdArray& x, double fill) {
  const std::size_t rank = x.shape.rank();
  if (rank < 2) return failf("{}: scores must be [..., s, t], got {}", kCausalMask, x.shape.to_string());
  const std::int64_t s = x.shape[rank - 2], t = x.shape[rank - 1];
  const std::int64_t query_offset = offset_along(ctx.input_offsets, 0, rank - 2);
  const std::int64_t key_offset = offset_along(ctx.input_offsets, 0, rank - 1);
  NdArray out = x;
  for (std::size_t at = 0; at < out.data.size(); ++at) {
    const auto flat = static_cast<std::int64_t>(at);
    const std::int64_t i = flat / t % s, j = flat % t;
    if (key_offset + j > query_offset + i) out.data[at] = fill;
  }
  return out;
}

Expected<std::vector<NdArray>> causal_mask_forward(const KernelContext& ctx, std::span<const NdArray> in) {
  LOOM_RETURN_IF_ERROR(expect_arity(in, 1, 1, kCausalMask));
  LOOM_ASSIGN_OR_RETURN(NdArray out, mask_after_query(ctx, in[0], kMaskedScore));
  return std::vector<NdArray>{std::move(out)};
}

// Reads only the output gradient: the op saves nothing.
Expected<std::vector<NdArray>> causal_mask_backward(const KernelContext& ctx, std::span<const NdArray>,
                                                    std::span<const NdArray>, std::span<const NdArray> grad_out) {
  if (grad_out.size() != 1)
    return failf("{}: backward needs one output gradient, got {}", kCausalMask, grad_out.size());
  LOOM_ASSIGN_OR_RETURN(NdArray grad, mask_after_query(ctx, grad_out[0], 0.0));
  return std::vector<NdArray>{std::move(grad)};
}

}  // namespace

void register_attention_kernels(KernelRegistry& r) {
  r.add(std::string(kSdpa), {sdpa_forward, sdpa_backward});
  r.add(std::string(kRotary), {rotary_forward, rotary_backward});
  r.add(std::string(kCausalMask), {causal_mask_forward, causal_mask_backward});
}

}  // namespace loom::verify
