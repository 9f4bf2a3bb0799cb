// Cross entropy in vocabulary-splittable parts (src/ops/cross_entropy_parts.cc), per token t with
// label y, smoothing eps and full vocabulary V:
//   target_logit:             z_t = (1 - eps) x[t, y] + eps / V sum_c x[t, c]
//   cross_entropy_parts:      s_t = sum_c exp(x[t, c] - shift_t), and z_t as above
//   cross_entropy_from_parts: sum over counted tokens of log s_t + shift_t - z_t, divided by the whole
//                             labels' element count (cross_entropy's rule without a count: kernels_loss.cc)
// which equals cross_entropy's value when shift = z. Tokens whose label is ignore_index give
// zeros and no gradient. Under a vocabulary split the logits are a shard whose first class is
// input_offsets[0].back(): a label outside it picks nothing, sums run over the shard's classes and V
// is the FullTensor's, so the shards' outputs add up to the whole. The shift takes no gradient (it is
// a stabiliser whose total derivative through the parts and the loss is zero).
#include <cmath>

#include "kernel_support.h"
#include "loom/verify/kernel_families.h"

namespace loom::verify {
namespace {

using namespace detail;

struct Rows {
  std::size_t tokens = 0, width = 0;  // width: classes in this shard
  std::int64_t first_class = 0;       // global class of the shard's column 0
  double vocabulary = 0;              // classes in the whole vocabulary
  double smoothing = 0;
  std::vector<bool> counted;  // per token: its label is not ignore_index
};

Expected<std::int64_t> ignore_index(const KernelContext& ctx, std::string_view op) {
  return attr(ir::get_int_or(ctx.attrs, "ignore_index", -100), op);
}

// Checks labels against the full vocabulary; `labels` is the per-token integer input.
Expected<std::vector<bool>> counted_tokens(const KernelContext& ctx, const NdArray& labels, double vocabulary,
                                           std::string_view op) {
  LOOM_ASSIGN_OR_RETURN(std::int64_t ignore, ignore_index(ctx, op));
  std::vector<bool> counted;
  for (double label : labels.data) {
    const bool keep = label != static_cast<double>(ignore);
    if (keep && (label != std::floor(label) || label < 0 || label >= vocabulary))
      return failf("{}: label {} is not a class in [0, {}) nor ignore_index {}", op, label, vocabulary, ignore);
    counted.push_back(keep);
  }
  return counted;
}

// Logits [.., v] (input 0), labels [..] (input 1) and `per_token` more [..] inputs.
Expected<Rows> rows(const KernelContext& ctx, Inputs in, std::size_t per_token, std::string_view op) {
  LOOM_RETURN_IF_ERROR(expect_arity(in, 2 + per_token, 2 + per_token, op));
  const NdArray &logits = in[0], &labels = in[1];
  if (logits.shape.rank() < 1 || labels.shape.rank() + 1 != logits.shape.rank() ||
      !std::equal(labels.shape.dims.begin(), labels.shape.dims.end(), logits.shape.dims.begin()))
    return failf("{}: labels {} must have the shape of logits {} without its last dim", op, labels.shape.to_string(),
                 logits.shape.to_string());
  for (std::size_t i = 2; i < 2 + per_token; ++i)
    if (in[i].shape != labels.shape)
      return failf("{}: input {} has shape {}, expected the labels' {}", op, i, in[i].shape.to_string(),
                   labels.shape.to_string());
  Rows r;
  r.tokens = static_cast<std::size_t>(labels.numel());
  r.width = static_cast<std::size_t>(logits.shape.dims.back());
  const std::span<const std::int64_t> offset = input_offset(ctx, 0);
  if (!offset.empty()) r.first_class = offset.back();
  r.vocabulary = static_cast<double>(full_input_shape(ctx, in, 0).dims.back());
  LOOM_ASSIGN_OR_RETURN(r.smoothing, attr(ir::get_real_or(ctx.attrs, "label_smoothing", 0.0), op));
  if (r.smoothing < 0 || r.smoothing >= 1) return failf("{}: label_smoothing {} is outside [0, 1)", op, r.smoothing);
  LOOM_ASSIGN_OR_RETURN(r.counted, counted_tokens(ctx, labels, r.vocabulary, op));
  return r;
}

// The target distribution's weight of the shard's column c for label y.
double weight(const Rows& r, std::size_t c, double label) {
  const bool hit = static_cast<double>(r.first_class + static_cast<std::int64_t>(c)) == label;
  return (1 - r.smoothing) * (hit ? 1.0 : 0.0) + r.smoothing / r.vocabulary;
}

// z_t over the shard's columns (0 for an ignored token).
NdArray target(const Rows& r, Inputs in) {
  NdArray z(in[1].shape);
  for (std::size_t t = 0; t < r.tokens; ++t) {
    if (!r.counted[t]) continue;
    for (std::size_t c = 0; c < r.width; ++c) z.data[t] += weight(r, c, in[1].data[t]) * in[0].data[t * r.width + c];
  }
  return z;
}

// d x[t, c] += g_t * weight(c): the target's gradient.
void add_target_gradient(const Rows& r, Inputs in, const NdArray& g, NdArray& dx) {
  for (std::size_t t = 0; t < r.tokens; ++t) {
    if (!r.counted[t]) continue;
    for (std::size_t c = 0; c < r.width; ++c) dx.data[t * r.width + c] += g.data[t] * weight(r, c, in[1].data[t]);
  }
}

Kernel target_logit_kernel() {
  constexpr std::string_view op = "target_logit";
  Kernel k;
  k.forward = [op](const KernelContext& ctx, Inputs in) -> Expected<Arrays> {
    LOOM_ASSIGN_OR_RETURN(Rows r, rows(ctx, in, 0, op));
    return Arrays{target(r, in)};
  };
  k.backward = [op](const KernelContext& ctx, Inputs in, Inputs, Inputs grads) -> Expected<Arrays> {
    LOOM_ASSIGN_OR_RETURN(Rows r, rows(ctx, in, 0, op));
    LOOM_ASSIGN_OR_RETURN(const NdArray* g, single_grad(grads, in[1].shape, op));
    NdArray dx(in[0].shape);
    add_target_gradient(r, in, *g, dx);
    return Arrays{std::move(dx), NdArray{}};
  };
  return k;
}

Kernel parts_kernel() {
  constexpr std::string_view op = "cross_entropy_parts";
  Kernel k;
  k.forward = [op](const KernelContext& ctx, Inputs in) -> Expected<Arrays> {
    LOOM_ASSIGN_OR_RETURN(Rows r, rows(ctx, in, 1, op));
    NdArray sum(in[1].shape);
    for (std::size_t t = 0; t < r.tokens; ++t) {
      if (!r.counted[t]) continue;
      for (std::size_t c = 0; c < r.width; ++c) sum.data[t] += std::exp(in[0].data[t * r.width + c] - in[2].data[t]);
    }
    return Arrays{std::move(sum), target(r, in)};
  };
  // d x[t, c] = d sum_t exp(x[t, c] - shift_t) + d target_t weight(c); the shift gets none.
  k.backward = [op](const KernelContext& ctx, Inputs in, Inputs, Inputs grads) -> Expected<Arrays> {
    LOOM_ASSIGN_OR_RETURN(Rows r, rows(ctx, in, 1, op));
    if (grads.size() != 2 || grads[0].shape != in[1].shape || grads[1].shape != in[1].shape)
      return failf("{}: backward expects 2 output gradients of shape {}", op, in[1].shape.to_string());
    NdArray dx(in[0].shape);
    for (std::size_t t = 0; t < r.tokens; ++t) {
      if (!r.counted[t]) continue;
      for (std::size_t c = 0; c < r.width; ++c)
        dx.data[t * r.width + c] = grads[0].data[t] * std::exp(in[0].data[t * r.width + c] - in[2].data[t]);
    }
    add_target_gradient(r, in, grads[1], dx);
    return Arrays{std::move(dx), NdArray{}, NdArray{}};
  };
  return k;
}

struct Tokens {
  std::vector<bool> counted;
  double divisor = 1;  // the whole labels' element count, whole or a token shard
};

// (sum, shift, target, labels), all [..]. Sums must be positive where counted.
Expected<Tokens> tokens(const KernelContext& ctx, Inputs in, std::string_view op) {
  LOOM_RETURN_IF_ERROR(expect_arity(in, 4, 4, op));
  for (std::size_t i = 1; i < 4; ++i)
    if (in[i].shape != in[0].shape)
      return failf("{}: input {} has shape {}, but the sums are {}", op, i, in[i].shape.to_string(), in[0].shape.to_string());
  Tokens tk;
  LOOM_ASSIGN_OR_RETURN(std::int64_t ignore, ignore_index(ctx, op));
  for (std::size_t t = 0; t < in[3].data.size(); ++t) {
    const bool keep = in[3].data[t] != static_cast<double>(ignore);
    if (keep && !(in[0].data[t] > 0))
      return failf("{}: token {} has sum {}; a sum of exponentials must be positive", op, t, in[0].data[t]);
    tk.counted.push_back(keep);
  }
  tk.divisor = static_cast<double>(full_input_shape(ctx, in, 3).numel());
  return tk;
}

Kernel from_parts_kernel() {
  constexpr std::string_view op = "cross_entropy_from_parts";
  Kernel k;
  k.forward = [op](const KernelContext& ctx, Inputs in) -> Expected<Arrays> {
    LOOM_ASSIGN_OR_RETURN(Tokens tk, tokens(ctx, in, op));
    double total = 0;
    for (std::size_t t = 0; t < tk.counted.size(); ++t)
      if (tk.counted[t]) total += std::log(in[0].data[t]) + in[1].data[t] - in[2].data[t];
    return Arrays{NdArray(ir::Shape{}, tk.divisor > 0 ? total / tk.divisor : 0.0)};
  };
  k.backward = [op](const KernelContext& ctx, Inputs in, Inputs, Inputs grads) -> Expected<Arrays> {
    LOOM_ASSIGN_OR_RETURN(Tokens tk, tokens(ctx, in, op));
    LOOM_ASSIGN_OR_RETURN(const NdArray* g, single_grad(grads, ir::Shape{}, op));
    const double scale = tk.divisor > 0 ? g->data[0] / tk.divisor : 0.0;
    NdArray d_sum(in[0].shape), d_target(in[2].shape);
    for (std::size_t t = 0; t < tk.counted.size(); ++t) {
      if (!tk.counted[t]) continue;
      d_sum.data[t] = scale / in[0].data[t];
      d_target.data[t] = -scale;
    }
    return Arrays{std::move(d_sum), NdArray{}, std::move(d_target), NdArray{}};
  };
  return k;
}

}  // namespace

void register_cross_entropy_parts_kernels(KernelRegistry& r) {
  r.add("target_logit", target_logit_kernel());
  r.add("cross_entropy_parts", parts_kernel());
  r.add("cross_entropy_from_parts", from_parts_kernel());
}

}  // namespace loom::verify
