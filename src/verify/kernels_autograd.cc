// Ops the backward pass inserts: "accumulate" sums same-shape partial gradients, "fill_like" seeds
// the loss gradient with a constant (attr "value", default 1).
#include "kernel_support.h"
#include "loom/verify/kernel_families.h"

namespace loom::verify {
namespace {

using namespace detail;

Kernel accumulate_kernel() {
  Kernel k;
  k.forward = [](const KernelContext&, Inputs in) -> Expected<Arrays> {
    if (in.empty()) return fail("accumulate: needs at least one tensor to sum");
    NdArray total = in[0];
    for (std::size_t t = 1; t < in.size(); ++t) {
      LOOM_RETURN_IF_ERROR(expect_same_shape(in[0], in[t], "accumulate", "summands"));
      for (std::size_t i = 0; i < total.data.size(); ++i) total.data[i] += in[t].data[i];
    }
    return Arrays{std::move(total)};
  };
  // Every summand receives the output gradient unchanged.
  k.backward = [](const KernelContext&, Inputs in, Inputs, Inputs grads) -> Expected<Arrays> {
    if (in.empty()) return fail("accumulate: needs at least one tensor to sum");
    LOOM_ASSIGN_OR_RETURN(const NdArray* g, single_grad(grads, in[0].shape, "accumulate"));
    return Arrays(in.size(), *g);
  };
  return k;
}

Kernel fill_like_kernel() {
  Kernel k;
  k.forward = [](const KernelContext& ctx, Inputs in) -> Expected<Arrays> {
    LOOM_RETURN_IF_ERROR(expect_arity(in, 1, 1, "fill_like"));
    LOOM_ASSIGN_OR_RETURN(double value, attr(ir::get_real_or(ctx.attrs, "value", 1.0), "fill_like"));
    return Arrays{NdArray(in[0].shape, value)};
  };
  return k;
}

}  // namespace

void register_autograd_kernels(KernelRegistry& r) {
  r.add("accumulate", accumulate_kernel());
  r.add("fill_like", fill_like_kernel());
}

}  // namespace loom::verify
