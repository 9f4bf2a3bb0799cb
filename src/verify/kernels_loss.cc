// Losses, as torch computes them with reduction='mean' (the divisor one whole-batch number, whole or split).
// cross_entropy / nll_loss: per token, (1 - eps) * -logp[label] + eps / V * sum_c -logp[c] (torch's
// label smoothing), tokens whose label is ignore_index (default -100) skipped, the sum divided by the
// third input when given (the whole batch's counted tokens, a derived input: torch's mean), else by the
// whole labels' element count (torch's mean when no token is ignored). nll_loss applies the same rule
// to the log-probabilities it is given. A shard of the labels divides by the same whole-batch divisor,
// so the shards' partial losses add up to the whole exactly. mse_loss divides by pred's whole count.
#include <cmath>

#include "kernel_support.h"
#include "loom/verify/kernel_families.h"

namespace loom::verify {
namespace {

using namespace detail;

struct Classification {
  std::int64_t tokens = 0, classes = 0;
  double smoothing = 0;
  std::vector<bool> counted;  // per token: its label is not ignore_index
  double divisor = 1;  // the counted tokens given, else the whole labels' element count
};

Expected<Classification> classification(const KernelContext& ctx, Inputs in, std::string_view op) {
  LOOM_RETURN_IF_ERROR(expect_arity(in, 2, 3, op));
  const NdArray &scores = in[0], &labels = in[1];
  if (scores.shape.rank() < 1 || labels.shape.rank() + 1 != scores.shape.rank() ||
      !std::equal(labels.shape.dims.begin(), labels.shape.dims.end(), scores.shape.dims.begin()))
    return failf("{}: labels {} must have the shape of scores {} without its last dim", op, labels.shape.to_string(),
                 scores.shape.to_string());
  Classification c;
  c.classes = scores.shape.dims.back();
  c.tokens = labels.numel();
  LOOM_ASSIGN_OR_RETURN(c.smoothing, attr(ir::get_real_or(ctx.attrs, "label_smoothing", 0.0), op));
  LOOM_ASSIGN_OR_RETURN(std::int64_t ignore, attr(ir::get_int_or(ctx.attrs, "ignore_index", -100), op));
  if (c.smoothing < 0 || c.smoothing >= 1) return failf("{}: label_smoothing {} is outside [0, 1)", op, c.smoothing);
  for (double label : labels.data) {
    const bool keep = label != static_cast<double>(ignore);
    if (keep && (label != std::floor(label) || label < 0 || label >= static_cast<double>(c.classes)))
      return failf("{}: label {} is not a class in [0, {}) nor ignore_index {}", op, label, c.classes, ignore);
    c.counted.push_back(keep);
  }
  if (in.size() == 3 && in[2].data.size() != 1)
    return failf("{}: the counted tokens (input 2) have shape {}, not a scalar", op, in[2].shape.to_string());
  c.divisor = in.size() == 3 ? in[2].data[0] : static_cast<double>(full_input_shape(ctx, in, 1).numel());
  return c;
}

// Log-probabilities of each token's row: log_softmax of logits, or the input itself for nll_loss.
NdArray log_probs(const NdArray& scores, bool from_logits) {
  if (!from_logits) return scores;
  NdArray out(scores.shape);
  const std::size_t v = static_cast<std::size_t>(scores.shape.dims.back());
  for (std::size_t row = 0; row * v < scores.data.size(); ++row) {
    const double* x = scores.data.data() + row * v;
    double peak = -INFINITY, total = 0;
    for (std::size_t c = 0; c < v; ++c) peak = std::max(peak, x[c]);
    for (std::size_t c = 0; c < v; ++c) total += std::exp(x[c] - peak);
    for (std::size_t c = 0; c < v; ++c) out.data[row * v + c] = x[c] - peak - std::log(total);
  }
  return out;
}

// The smoothed target distribution's weight of class c for a token labelled `label`.
double target_weight(const Classification& c, std::size_t cls, double label) {
  return (1 - c.smoothing) * (static_cast<double>(cls) == label ? 1.0 : 0.0) + c.smoothing / static_cast<double>(c.classes);
}

Kernel classification_loss(std::string op, bool from_logits) {
  Kernel k;
  k.forward = [op, from_logits](const KernelContext& ctx, Inputs in) -> Expected<Arrays> {
    LOOM_ASSIGN_OR_RETURN(Classification c, classification(ctx, in, op));
    const NdArray logp = log_probs(in[0], from_logits);
    const auto v = static_cast<std::size_t>(c.classes);
    double total = 0;
    for (std::size_t t = 0; t < static_cast<std::size_t>(c.tokens); ++t) {
      if (!c.counted[t]) continue;
      for (std::size_t cls = 0; cls < v; ++cls) total -= target_weight(c, cls, in[1].data[t]) * logp.data[t * v + cls];
    }
    return Arrays{NdArray(ir::Shape{}, c.divisor > 0 ? total / c.divisor : 0.0)};
  };
  // cross_entropy: d logits = (softmax - target) g / N; nll_loss: d logp = -target g / N.
  k.backward = [op, from_logits](const KernelContext& ctx, Inputs in, Inputs, Inputs grads) -> Expected<Arrays> {
    LOOM_ASSIGN_OR_RETURN(Classification c, classification(ctx, in, op));
    LOOM_ASSIGN_OR_RETURN(const NdArray* g, single_grad(grads, ir::Shape{}, op));
    const double scale = c.divisor > 0 ? g->data[0] / c.divisor : 0.0;
    const NdArray logp = log_probs(in[0], from_logits);
    const auto v = static_cast<std::size_t>(c.classes);
    NdArray d(in[0].shape);
    for (std::size_t t = 0; t < static_cast<std::size_t>(c.tokens); ++t) {
      if (!c.counted[t]) continue;
      for (std::size_t cls = 0; cls < v; ++cls) {
        const double target = target_weight(c, cls, in[1].data[t]);
        const double prob = from_logits ? std::exp(logp.data[t * v + cls]) : 0.0;
        d.data[t * v + cls] = scale * (prob - target);
      }
    }
    Arrays result{std::move(d), NdArray{}};
    if (in.size() == 3) result.emplace_back();  // the count takes no gradient
    return result;
  };
  return k;
}

Kernel mse_kernel() {
  const auto divisor = [](const KernelContext& ctx, Inputs in) { return static_cast<double>(full_count(ctx, in, 0)); };
  Kernel k;
  k.forward = [divisor](const KernelContext& ctx, Inputs in) -> Expected<Arrays> {
    LOOM_RETURN_IF_ERROR(expect_arity(in, 2, 2, "mse_loss"));
    LOOM_RETURN_IF_ERROR(expect_same_shape(in[0], in[1], "mse_loss", "pred and target"));
    double total = 0;
    for (std::size_t i = 0; i < in[0].data.size(); ++i) total += (in[0].data[i] - in[1].data[i]) * (in[0].data[i] - in[1].data[i]);
    return Arrays{NdArray(ir::Shape{}, total / divisor(ctx, in))};
  };
  k.backward = [divisor](const KernelContext& ctx, Inputs in, Inputs, Inputs grads) -> Expected<Arrays> {
    LOOM_RETURN_IF_ERROR(expect_arity(in, 2, 2, "mse_loss"));
    LOOM_RETURN_IF_ERROR(expect_same_shape(in[0], in[1], "mse_loss", "pred and target"));
    LOOM_ASSIGN_OR_RETURN(const NdArray* g, single_grad(grads, ir::Shape{}, "mse_loss"));
    const double scale = 2 * g->data[0] / divisor(ctx, in);
    LOOM_ASSIGN_OR_RETURN(NdArray d, zip(in[0], in[1], [scale](double p, double t) { return scale * (p - t); }, "mse_loss"));
    return Arrays{std::move(d), NdArray{}};
  };
  return k;
}

}  // namespace

void register_loss_kernels(KernelRegistry& r) {
  r.add("cross_entropy", classification_loss("cross_entropy", true));
  r.add("nll_loss", classification_loss("nll_loss", false));
  r.add("mse_loss", mse_kernel());
  register_cross_entropy_parts_kernels(r);  // kernels_cross_entropy_parts.cc
}

}  // namespace loom::verify
