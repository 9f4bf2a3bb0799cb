// Activations: pointwise ones (gelu exactly as torch, relu, silu), gated units, softmax-like ones
// along `dim`, and dropout with a mask that depends only on (seed, global element index).
#include <cmath>
#include <numbers>

#include "kernel_support.h"
#include "loom/verify/kernel_families.h"

namespace loom::verify {
namespace {

using namespace detail;

constexpr double kInvSqrt2 = 0.70710678118654752440;
constexpr double kSqrt2OverPi = 0.79788456080286535588;  // sqrt(2 / pi)
constexpr double kGeluCubic = 0.044715;

// torch.nn.functional.gelu: approximate 'none' is x * Phi(x) with the erf, 'tanh' the tanh formula.
double gelu(double x, bool tanh_form) {
  if (!tanh_form) return 0.5 * x * (1 + std::erf(x * kInvSqrt2));
  return 0.5 * x * (1 + std::tanh(kSqrt2OverPi * (x + kGeluCubic * x * x * x)));
}
double gelu_derivative(double x, bool tanh_form) {
  if (!tanh_form) {
    const double cdf = 0.5 * (1 + std::erf(x * kInvSqrt2));
    const double pdf = std::exp(-0.5 * x * x) / std::sqrt(2 * std::numbers::pi);
    return cdf + x * pdf;
  }
  const double t = std::tanh(kSqrt2OverPi * (x + kGeluCubic * x * x * x));
  return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * kSqrt2OverPi * (1 + 3 * kGeluCubic * x * x);
}
double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }
double silu(double x) { return x * sigmoid(x); }
double silu_derivative(double x) {
  const double s = sigmoid(x);
  return s * (1 + x * (1 - s));
}

Expected<bool> gelu_uses_tanh(const ir::Attrs& attrs) {
  const Expected<std::string> approximate = attr(ir::get_string_or(attrs, "approximate", "none"), "gelu");
  if (!approximate) return std::unexpected(approximate.error());
  if (*approximate != "none" && *approximate != "tanh")
    return failf("gelu: attribute 'approximate' is '{}', expected 'none' or 'tanh'", *approximate);
  return *approximate == "tanh";
}

Kernel gelu_kernel() {
  Kernel k;
  k.forward = [](const KernelContext& ctx, Inputs in) -> Expected<Arrays> {
    LOOM_RETURN_IF_ERROR(expect_arity(in, 1, 1, "gelu"));
    LOOM_ASSIGN_OR_RETURN(bool tanh_form, gelu_uses_tanh(ctx.attrs));
    return Arrays{map(in[0], [tanh_form](double x) { return gelu(x, tanh_form); })};
  };
  k.backward = [](const KernelContext& ctx, Inputs in, Inputs, Inputs grads) -> Expected<Arrays> {
    LOOM_RETURN_IF_ERROR(expect_arity(in, 1, 1, "gelu"));
    LOOM_ASSIGN_OR_RETURN(bool tanh_form, gelu_uses_tanh(ctx.attrs));
    LOOM_ASSIGN_OR_RETURN(const NdArray* g, single_grad(grads, in[0].shape, "gelu"));
    LOOM_ASSIGN_OR_RETURN(NdArray dx, zip(in[0], *g, [tanh_form](double x, double gv) { return gv * gelu_derivative(x, tanh_form); }, "gelu"));
    return Arrays{std::move(dx)};
  };
  return k;
}

// relu saves only its output: y > 0 exactly where x > 0.
Kernel relu_kernel() {
  Kernel k;
  k.forward = [](const KernelContext&, Inputs in) -> Expected<Arrays> {
    LOOM_RETURN_IF_ERROR(expect_arity(in, 1, 1, "relu"));
    return Arrays{map(in[0], [](double x) { return x > 0 ? x : 0.0; })};
  };
  k.backward = [](const KernelContext&, Inputs, Inputs out, Inputs grads) -> Expected<Arrays> {
    if (out.size() != 1) return fail("relu: backward needs the forward output");
    LOOM_ASSIGN_OR_RETURN(const NdArray* g, single_grad(grads, out[0].shape, "relu"));
    LOOM_ASSIGN_OR_RETURN(NdArray dx, zip(out[0], *g, [](double y, double gv) { return y > 0 ? gv : 0.0; }, "relu"));
    return Arrays{std::move(dx)};
  };
  return k;
}

Kernel silu_kernel() {
  Kernel k;
  k.forward = [](const KernelContext&, Inputs in) -> Expected<Arrays> {
    LOOM_RETURN_IF_ERROR(expect_arity(in, 1, 1, "silu"));
    return Arrays{map(in[0], silu)};
  };
  k.backward = [](const KernelContext&, Inputs in, Inputs, Inputs grads) -> Expected<Arrays> {
    LOOM_RETURN_IF_ERROR(expect_arity(in, 1, 1, "silu"));
    LOOM_ASSIGN_OR_RETURN(const NdArray* g, single_grad(grads, in[0].shape, "silu"));
    LOOM_ASSIGN_OR_RETURN(NdArray dx, zip(in[0], *g, [](double x, double gv) { return gv * silu_derivative(x); }, "silu"));
    return Arrays{std::move(dx)};
  };
  return k;
}

// act(gate) * up, gate and up of the same shape.
Kernel gated(std::string op, std::function<double(double)> act, std::function<double(double)> act_derivative) {
  Kernel k;
  k.forward = [op, act](const KernelContext&, Inputs in) -> Expected<Arrays> {
    LOOM_RETURN_IF_ERROR(expect_arity(in, 2, 2, op));
    LOOM_ASSIGN_OR_RETURN(NdArray y, zip(in[0], in[1], [&act](double g, double u) { return act(g) * u; }, op));
    return Arrays{std::move(y)};
  };
  k.backward = [op, act, act_derivative](const KernelContext&, Inputs in, Inputs, Inputs grads) -> Expected<Arrays> {
    LOOM_RETURN_IF_ERROR(expect_arity(in, 2, 2, op));
    LOOM_RETURN_IF_ERROR(expect_same_shape(in[0], in[1], op, "gate and up"));
    LOOM_ASSIGN_OR_RETURN(const NdArray* g, single_grad(grads, in[0].shape, op));
    NdArray d_gate(in[0].shape), d_up(in[1].shape);
    for (std::size_t i = 0; i < g->data.size(); ++i) {
      d_gate.data[i] = g->data[i] * in[1].data[i] * act_derivative(in[0].data[i]);
      d_up.data[i] = g->data[i] * act(in[0].data[i]);
    }
    return Arrays{std::move(d_gate), std::move(d_up)};
  };
  return k;
}

Expected<std::size_t> softmax_dim(const KernelContext& ctx, const NdArray& x, std::string_view op) {
  LOOM_ASSIGN_OR_RETURN(std::int64_t dim, attr(ir::get_int_or(ctx.attrs, "dim", -1), op));
  return resolve_dim(dim, x.shape.rank(), op);
}

// Softmax (or log-softmax) along `dim`, max-shifted for stability.
Kernel softmax_kernel(bool log_form) {
  const std::string op = log_form ? "log_softmax" : "softmax";
  Kernel k;
  k.forward = [op, log_form](const KernelContext& ctx, Inputs in) -> Expected<Arrays> {
    LOOM_RETURN_IF_ERROR(expect_arity(in, 1, 1, op));
    LOOM_ASSIGN_OR_RETURN(std::size_t dim, softmax_dim(ctx, in[0], op));
    const std::int64_t n = in[0].shape[dim];
    NdArray y(in[0].shape);
    for_each_lane(in[0].shape, dim, [&](std::int64_t base, std::int64_t stride) {
      const auto at = [&](std::int64_t j) { return static_cast<std::size_t>(base + j * stride); };
      double peak = -INFINITY;
      for (std::int64_t j = 0; j < n; ++j) peak = std::max(peak, in[0].data[at(j)]);
      double total = 0;
      for (std::int64_t j = 0; j < n; ++j) total += std::exp(in[0].data[at(j)] - peak);
      for (std::int64_t j = 0; j < n; ++j) {
        const double shifted = in[0].data[at(j)] - peak;
        y.data[at(j)] = log_form ? shifted - std::log(total) : std::exp(shifted) / total;
      }
    });
    return Arrays{std::move(y)};
  };
  // softmax: dx = y (g - sum(g y)); log_softmax: dx = g - exp(y) sum(g). Both need only the output.
  k.backward = [op, log_form](const KernelContext& ctx, Inputs, Inputs out, Inputs grads) -> Expected<Arrays> {
    if (out.size() != 1) return failf("{}: backward needs the forward output", op);
    const NdArray& y = out[0];
    LOOM_ASSIGN_OR_RETURN(std::size_t dim, softmax_dim(ctx, y, op));
    LOOM_ASSIGN_OR_RETURN(const NdArray* g, single_grad(grads, y.shape, op));
    const std::int64_t n = y.shape[dim];
    NdArray dx(y.shape);
    for_each_lane(y.shape, dim, [&](std::int64_t base, std::int64_t stride) {
      const auto at = [&](std::int64_t j) { return static_cast<std::size_t>(base + j * stride); };
      double total = 0;
      for (std::int64_t j = 0; j < n; ++j) total += log_form ? g->data[at(j)] : g->data[at(j)] * y.data[at(j)];
      for (std::int64_t j = 0; j < n; ++j) {
        const std::size_t i = at(j);
        dx.data[i] = log_form ? g->data[i] - std::exp(y.data[i]) * total : y.data[i] * (g->data[i] - total);
      }
    });
    return Arrays{std::move(dx)};
  };
  return k;
}

// splitmix64: a counter-based hash, so the mask of an element depends only on (seed, its index).
std::uint64_t mix(std::uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Per local element: 1 / (1 - p) where kept, 0 where dropped. The element's index is global (output
// offsets and the FullTensor's shape from the context), so every split reproduces the single-device mask.
Expected<NdArray> dropout_multiplier(const KernelContext& ctx, const ir::Shape& local) {
  LOOM_ASSIGN_OR_RETURN(double p, attr(ir::get_real_or(ctx.attrs, "p", 0.1), "dropout"));
  LOOM_ASSIGN_OR_RETURN(std::int64_t seed, attr(ir::get_int_or(ctx.attrs, "seed", 0), "dropout"));
  if (p < 0 || p >= 1) return failf("dropout: probability p = {} is outside [0, 1)", p);
  const ir::Shape& full = ctx.output_full_shapes.empty() ? local : ctx.output_full_shapes[0];
  std::span<const std::int64_t> offsets;
  if (!ctx.output_offsets.empty()) offsets = ctx.output_offsets[0];
  if (full.rank() != local.rank() || (!offsets.empty() && offsets.size() != local.rank()))
    return failf("dropout: context shape {} does not match the local shape {}", full.to_string(), local.to_string());
  const std::uint64_t key = mix(static_cast<std::uint64_t>(seed));
  NdArray multiplier(local);
  std::size_t flat = 0;
  for_each_index(local, [&](std::span<const std::int64_t> index) {
    const auto global = static_cast<std::uint64_t>(global_flat_index(index, offsets, full));
    const double u = static_cast<double>(mix(key ^ mix(global)) >> 11) * 0x1.0p-53;  // uniform in [0, 1)
    multiplier.data[flat++] = u < p ? 0.0 : 1 / (1 - p);
  });
  return multiplier;
}

Kernel dropout_kernel() {
  Kernel k;
  k.forward = [](const KernelContext& ctx, Inputs in) -> Expected<Arrays> {
    LOOM_RETURN_IF_ERROR(expect_arity(in, 1, 1, "dropout"));
    LOOM_ASSIGN_OR_RETURN(NdArray multiplier, dropout_multiplier(ctx, in[0].shape));
    LOOM_ASSIGN_OR_RETURN(NdArray y, zip(in[0], multiplier, std::multiplies<double>(), "dropout"));
    return Arrays{std::move(y)};
  };
  k.backward = [](const KernelContext& ctx, Inputs in, Inputs, Inputs grads) -> Expected<Arrays> {
    LOOM_RETURN_IF_ERROR(expect_arity(in, 1, 1, "dropout"));
    LOOM_ASSIGN_OR_RETURN(const NdArray* g, single_grad(grads, in[0].shape, "dropout"));
    LOOM_ASSIGN_OR_RETURN(NdArray multiplier, dropout_multiplier(ctx, in[0].shape));
    LOOM_ASSIGN_OR_RETURN(NdArray dx, zip(*g, multiplier, std::multiplies<double>(), "dropout"));
    return Arrays{std::move(dx)};
  };
  return k;
}

}  // namespace

void register_activation_kernels(KernelRegistry& r) {
  r.add("gelu", gelu_kernel());
  r.add("relu", relu_kernel());
  r.add("silu", silu_kernel());
  r.add("swiglu", gated("swiglu", silu, silu_derivative));
  r.add("geglu", gated("geglu", [](double x) { return gelu(x, false); }, [](double x) { return gelu_derivative(x, false); }));
  r.add("softmax", softmax_kernel(false));
  r.add("log_softmax", softmax_kernel(true));
  r.add("dropout", dropout_kernel());
}

}  // namespace loom::verify
