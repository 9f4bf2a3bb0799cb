// Comparisons: 1 where the relation holds, else 0, after numpy broadcasting. No backward: the ops
// are not differentiable (the registry marks them so, and autograd never asks). maximum / minimum
// pass the gradient to the selected input, split evenly on ties as torch does.
#include <algorithm>

#include "kernel_support.h"
#include "loom/verify/kernel_families.h"

namespace loom::verify {
namespace {

using namespace detail;

using Relation = std::function<bool(double, double)>;

Kernel comparison(std::string op, Relation holds) {
  Kernel k;
  k.forward = [op, holds](const KernelContext&, Inputs in) -> Expected<Arrays> {
    LOOM_RETURN_IF_ERROR(expect_arity(in, 2, 2, op));
    LOOM_ASSIGN_OR_RETURN(NdArray y, broadcast_apply(in[0], in[1], [&](double a, double b) { return holds(a, b) ? 1.0 : 0.0; }, op));
    return Arrays{std::move(y)};
  };
  return k;
}

// max(a, b) (or min when `larger` is false) with broadcasting.
Kernel selection(std::string op, bool larger) {
  const auto pick = [larger](double a, double b) { return larger ? std::max(a, b) : std::min(a, b); };
  // The share of the gradient that reaches a: 1 where a is selected, 0.5 on a tie.
  const auto share_a = [larger](double a, double b) { return a == b ? 0.5 : ((a > b) == larger ? 1.0 : 0.0); };
  Kernel k;
  k.forward = [op, pick](const KernelContext&, Inputs in) -> Expected<Arrays> {
    LOOM_RETURN_IF_ERROR(expect_arity(in, 2, 2, op));
    LOOM_ASSIGN_OR_RETURN(NdArray y, broadcast_apply(in[0], in[1], pick, op));
    return Arrays{std::move(y)};
  };
  k.backward = [op, share_a](const KernelContext&, Inputs in, Inputs, Inputs grads) -> Expected<Arrays> {
    LOOM_RETURN_IF_ERROR(expect_arity(in, 2, 2, op));
    if (grads.size() != 1) return failf("{}: backward expects 1 output gradient", op);
    const NdArray operands[] = {in[0], in[1], grads[0]};
    LOOM_ASSIGN_OR_RETURN(NdArray ga, broadcast_map(operands, [&](std::span<const double> v) { return v[2] * share_a(v[0], v[1]); }, op));
    LOOM_ASSIGN_OR_RETURN(NdArray gb, broadcast_map(operands, [&](std::span<const double> v) { return v[2] * (1 - share_a(v[0], v[1])); }, op));
    LOOM_ASSIGN_OR_RETURN(NdArray da, sum_to_shape(ga, in[0].shape));
    LOOM_ASSIGN_OR_RETURN(NdArray db, sum_to_shape(gb, in[1].shape));
    return Arrays{std::move(da), std::move(db)};
  };
  return k;
}

}  // namespace

void register_comparison_kernels(KernelRegistry& r) {
  r.add("eq", comparison("eq", std::equal_to<double>()));
  r.add("ne", comparison("ne", std::not_equal_to<double>()));
  r.add("lt", comparison("lt", std::less<double>()));
  r.add("le", comparison("le", std::less_equal<double>()));
  r.add("gt", comparison("gt", std::greater<double>()));
  r.add("ge", comparison("ge", std::greater_equal<double>()));
  r.add("maximum", selection("maximum", true));
  r.add("minimum", selection("minimum", false));
}

}  // namespace loom::verify
