// Pointwise math. Binary ops broadcast like numpy; a broadcast input's gradient is summed back to
// its shape. Unary ops are a value function plus a derivative that may use the input or the output
// (ops that save only their output, like exp, differentiate through it).
#include <cmath>
#include <limits>

#include "kernel_support.h"
#include "loom/ir/dtype.h"
#include "loom/verify/kernel_families.h"

namespace loom::verify {
namespace {

using namespace detail;

// Returns a kernel for y = f(x) whose derivative dy/dx = df(x, y, attrs-bound state).
using UnaryFn = std::function<double(double)>;
using DerivativeFn = std::function<double(double x, double y)>;
using UnaryFactory = std::function<Expected<std::pair<UnaryFn, DerivativeFn>>(const ir::Attrs&)>;

Kernel unary(std::string op, UnaryFactory factory) {
  Kernel k;
  k.forward = [op, factory](const KernelContext& ctx, Inputs in) -> Expected<Arrays> {
    LOOM_RETURN_IF_ERROR(expect_arity(in, 1, 1, op));
    LOOM_ASSIGN_OR_RETURN(auto fns, factory(ctx.attrs));
    return Arrays{map(in[0], fns.first)};
  };
  k.backward = [op, factory](const KernelContext& ctx, Inputs in, Inputs out, Inputs grads) -> Expected<Arrays> {
    LOOM_RETURN_IF_ERROR(expect_arity(in, 1, 1, op));
    LOOM_ASSIGN_OR_RETURN(auto fns, factory(ctx.attrs));
    LOOM_ASSIGN_OR_RETURN(const NdArray* g, single_grad(grads, in[0].shape, op));
    if (out.size() != 1 || out[0].shape != in[0].shape) return failf("{}: backward needs the forward output", op);
    NdArray dx(in[0].shape);
    for (std::size_t i = 0; i < dx.data.size(); ++i) dx.data[i] = g->data[i] * fns.second(in[0].data[i], out[0].data[i]);
    return Arrays{std::move(dx)};
  };
  return k;
}

// A unary op without attributes.
Kernel simple(std::string op, UnaryFn f, DerivativeFn df) {
  return unary(std::move(op), [f, df](const ir::Attrs&) -> Expected<std::pair<UnaryFn, DerivativeFn>> {
    return std::pair{f, df};
  });
}

using BinaryFn = std::function<double(double, double)>;

// a (op) b with broadcasting; da and db are the partial derivatives at (a, b).
Kernel binary(std::string op, BinaryFn f, BinaryFn da, BinaryFn db) {
  Kernel k;
  k.forward = [op, f](const KernelContext&, Inputs in) -> Expected<Arrays> {
    LOOM_RETURN_IF_ERROR(expect_arity(in, 2, 2, op));
    LOOM_ASSIGN_OR_RETURN(NdArray y, broadcast_apply(in[0], in[1], f, op));
    return Arrays{std::move(y)};
  };
  k.backward = [op, da, db](const KernelContext&, Inputs in, Inputs, Inputs grads) -> Expected<Arrays> {
    LOOM_RETURN_IF_ERROR(expect_arity(in, 2, 2, op));
    if (grads.size() != 1) return failf("{}: backward expects 1 output gradient", op);
    const NdArray operands[] = {in[0], in[1], grads[0]};
    LOOM_ASSIGN_OR_RETURN(NdArray ga, broadcast_map(operands, [&](std::span<const double> v) { return v[2] * da(v[0], v[1]); }, op));
    LOOM_ASSIGN_OR_RETURN(NdArray gb, broadcast_map(operands, [&](std::span<const double> v) { return v[2] * db(v[0], v[1]); }, op));
    LOOM_ASSIGN_OR_RETURN(NdArray dxa, sum_to_shape(ga, in[0].shape));
    LOOM_ASSIGN_OR_RETURN(NdArray dxb, sum_to_shape(gb, in[1].shape));
    return Arrays{std::move(dxa), std::move(dxb)};
  };
  return k;
}

double sign(double x) { return x > 0 ? 1.0 : (x < 0 ? -1.0 : 0.0); }

Kernel scale_kernel() {
  return unary("scale", [](const ir::Attrs& attrs) -> Expected<std::pair<UnaryFn, DerivativeFn>> {
    LOOM_ASSIGN_OR_RETURN(double factor, attr(ir::get_real(attrs, "factor"), "scale"));
    return std::pair{UnaryFn([factor](double x) { return x * factor; }),
                     DerivativeFn([factor](double, double) { return factor; })};
  });
}

Kernel pow_kernel() {
  return unary("pow", [](const ir::Attrs& attrs) -> Expected<std::pair<UnaryFn, DerivativeFn>> {
    LOOM_ASSIGN_OR_RETURN(double e, attr(ir::get_real(attrs, "exponent"), "pow"));
    return std::pair{UnaryFn([e](double x) { return std::pow(x, e); }),
                     DerivativeFn([e](double x, double) { return e == 0 ? 0.0 : e * std::pow(x, e - 1); })};
  });
}

// Python's %: the result takes the divisor's sign; the derivative is 1 (torch's remainder backward).
Kernel remainder_kernel() {
  return unary("remainder", [](const ir::Attrs& attrs) -> Expected<std::pair<UnaryFn, DerivativeFn>> {
    LOOM_ASSIGN_OR_RETURN(double d, attr(ir::get_real(attrs, "divisor"), "remainder"));
    if (d == 0) return failf("remainder: divisor is 0");
    return std::pair{UnaryFn([d](double x) { return x - std::floor(x / d) * d; }),
                     DerivativeFn([](double, double) { return 1.0; })};
  });
}

// torch.clamp: the gradient passes where min <= x <= max (bounds inclusive).
Kernel clamp_kernel() {
  return unary("clamp", [](const ir::Attrs& attrs) -> Expected<std::pair<UnaryFn, DerivativeFn>> {
    const double inf = std::numeric_limits<double>::infinity();
    LOOM_ASSIGN_OR_RETURN(double lo, attr(ir::get_real_or(attrs, "min", -inf), "clamp"));
    LOOM_ASSIGN_OR_RETURN(double hi, attr(ir::get_real_or(attrs, "max", inf), "clamp"));
    return std::pair{UnaryFn([lo, hi](double x) { return std::min(std::max(x, lo), hi); }),
                     DerivativeFn([lo, hi](double x, double) { return x >= lo && x <= hi ? 1.0 : 0.0; })};
  });
}

// Floating targets keep the value (the reference computes in float64 throughout); integer targets
// truncate toward zero and booleans test for non-zero, as torch's .to() does. Only the floating
// case passes a gradient.
Kernel cast_kernel() {
  return unary("cast", [](const ir::Attrs& attrs) -> Expected<std::pair<UnaryFn, DerivativeFn>> {
    const Expected<std::string> name = attr(ir::get_string(attrs, "dtype"), "cast");
    if (!name) return std::unexpected(name.error());
    const Expected<ir::DType> dtype = ir::parse_dtype(*name);
    if (!dtype) return failf("cast: attribute 'dtype' = '{}' is not a dtype", *name);
    if (*dtype == ir::DType::boolean)
      return std::pair{UnaryFn([](double x) { return x != 0 ? 1.0 : 0.0; }), DerivativeFn([](double, double) { return 0.0; })};
    if (!ir::is_floating(*dtype))
      return std::pair{UnaryFn([](double x) { return std::trunc(x); }), DerivativeFn([](double, double) { return 0.0; })};
    return std::pair{UnaryFn([](double x) { return x; }), DerivativeFn([](double, double) { return 1.0; })};
  });
}

// cond ? a : b with the three broadcast together; cond gets no gradient.
Kernel where_kernel() {
  Kernel k;
  k.forward = [](const KernelContext&, Inputs in) -> Expected<Arrays> {
    LOOM_RETURN_IF_ERROR(expect_arity(in, 3, 3, "where"));
    LOOM_ASSIGN_OR_RETURN(NdArray y, broadcast_map(in, [](std::span<const double> v) { return v[0] != 0 ? v[1] : v[2]; }, "where"));
    return Arrays{std::move(y)};
  };
  k.backward = [](const KernelContext&, Inputs in, Inputs, Inputs grads) -> Expected<Arrays> {
    LOOM_RETURN_IF_ERROR(expect_arity(in, 3, 3, "where"));
    if (grads.size() != 1) return fail("where: backward expects 1 output gradient");
    const NdArray operands[] = {in[0], grads[0]};
    LOOM_ASSIGN_OR_RETURN(NdArray ga, broadcast_map(operands, [](std::span<const double> v) { return v[0] != 0 ? v[1] : 0.0; }, "where"));
    LOOM_ASSIGN_OR_RETURN(NdArray gb, broadcast_map(operands, [](std::span<const double> v) { return v[0] != 0 ? 0.0 : v[1]; }, "where"));
    LOOM_ASSIGN_OR_RETURN(NdArray da, sum_to_shape(ga, in[1].shape));
    LOOM_ASSIGN_OR_RETURN(NdArray db, sum_to_shape(gb, in[2].shape));
    return Arrays{NdArray{}, std::move(da), std::move(db)};
  };
  return k;
}

// x where the mask (broadcast to x) is false, `value` where it is true.
Kernel masked_fill_kernel() {
  Kernel k;
  k.forward = [](const KernelContext& ctx, Inputs in) -> Expected<Arrays> {
    LOOM_RETURN_IF_ERROR(expect_arity(in, 2, 2, "masked_fill"));
    LOOM_ASSIGN_OR_RETURN(double value, attr(ir::get_real(ctx.attrs, "value"), "masked_fill"));
    LOOM_ASSIGN_OR_RETURN(NdArray y, broadcast_apply(in[0], in[1], [value](double x, double m) { return m != 0 ? value : x; }, "masked_fill"));
    if (y.shape != in[0].shape) return failf("masked_fill: mask {} would grow x {}", in[1].shape.to_string(), in[0].shape.to_string());
    return Arrays{std::move(y)};
  };
  k.backward = [](const KernelContext&, Inputs in, Inputs, Inputs grads) -> Expected<Arrays> {
    LOOM_RETURN_IF_ERROR(expect_arity(in, 2, 2, "masked_fill"));
    LOOM_ASSIGN_OR_RETURN(const NdArray* g, single_grad(grads, in[0].shape, "masked_fill"));
    LOOM_ASSIGN_OR_RETURN(NdArray dx, broadcast_apply(*g, in[1], [](double gv, double m) { return m != 0 ? 0.0 : gv; }, "masked_fill"));
    return Arrays{std::move(dx), NdArray{}};
  };
  return k;
}

}  // namespace

void register_elementwise_kernels(KernelRegistry& r) {
  const auto one = [](double, double) { return 1.0; };
  r.add("add", binary("add", std::plus<double>(), one, one));
  r.add("sub", binary("sub", std::minus<double>(), one, [](double, double) { return -1.0; }));
  r.add("mul", binary("mul", std::multiplies<double>(), [](double, double b) { return b; }, [](double a, double) { return a; }));
  r.add("div", binary("div", std::divides<double>(), [](double, double b) { return 1 / b; },
                      [](double a, double b) { return -a / (b * b); }));

  r.add("scale", scale_kernel());
  r.add("neg", simple("neg", [](double x) { return -x; }, [](double, double) { return -1.0; }));
  r.add("exp", simple("exp", [](double x) { return std::exp(x); }, [](double, double y) { return y; }));
  r.add("log", simple("log", [](double x) { return std::log(x); }, [](double x, double) { return 1 / x; }));
  r.add("sqrt", simple("sqrt", [](double x) { return std::sqrt(x); }, [](double, double y) { return 0.5 / y; }));
  r.add("rsqrt", simple("rsqrt", [](double x) { return 1 / std::sqrt(x); }, [](double, double y) { return -0.5 * y * y * y; }));
  r.add("tanh", simple("tanh", [](double x) { return std::tanh(x); }, [](double, double y) { return 1 - y * y; }));
  r.add("sigmoid", simple("sigmoid", [](double x) { return 1 / (1 + std::exp(-x)); }, [](double, double y) { return y * (1 - y); }));
  r.add("abs", simple("abs", [](double x) { return std::abs(x); }, [](double x, double) { return sign(x); }));
  r.add("square", simple("square", [](double x) { return x * x; }, [](double x, double) { return 2 * x; }));
  r.add("reciprocal", simple("reciprocal", [](double x) { return 1 / x; }, [](double, double y) { return -y * y; }));
  r.add("acos", simple("acos", [](double x) { return std::acos(x); }, [](double x, double) { return -1 / std::sqrt(1 - x * x); }));
  r.add("remainder", remainder_kernel());
  r.add("pow", pow_kernel());
  r.add("clamp", clamp_kernel());
  r.add("where", where_kernel());
  r.add("masked_fill", masked_fill_kernel());
  r.add("cast", cast_kernel());
  register_comparison_kernels(r);
}

}  // namespace loom::verify
