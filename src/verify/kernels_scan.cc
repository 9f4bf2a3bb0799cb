// cumsum: a running sum along one dim. Its gradient is the running sum of the output gradient taken
// from the other end (each input element reaches every later output of its lane).
#include "kernel_support.h"
#include "loom/verify/kernel_families.h"

namespace loom::verify {
namespace {

using namespace detail;

Expected<std::size_t> scanned_dim(const KernelContext& ctx, const NdArray& x) {
  LOOM_ASSIGN_OR_RETURN(std::int64_t dim, attr(ir::get_int(ctx.attrs, "dim"), "cumsum"));
  return resolve_dim(dim, x.shape.rank(), "cumsum");
}

// Running sums of `x` along `dim`, forwards or from the end.
NdArray running_sum(const NdArray& x, std::size_t dim, bool reversed) {
  NdArray y(x.shape);
  const std::int64_t n = x.shape[dim];
  for_each_lane(x.shape, dim, [&](std::int64_t base, std::int64_t stride) {
    double total = 0;
    for (std::int64_t step = 0; step < n; ++step) {
      const std::int64_t j = reversed ? n - 1 - step : step;
      const auto at = static_cast<std::size_t>(base + j * stride);
      total += x.data[at];
      y.data[at] = total;
    }
  });
  return y;
}

Kernel cumsum_kernel() {
  Kernel k;
  k.forward = [](const KernelContext& ctx, Inputs in) -> Expected<Arrays> {
    LOOM_RETURN_IF_ERROR(expect_arity(in, 1, 1, "cumsum"));
    LOOM_ASSIGN_OR_RETURN(std::size_t dim, scanned_dim(ctx, in[0]));
    return Arrays{running_sum(in[0], dim, false)};
  };
  k.backward = [](const KernelContext& ctx, Inputs in, Inputs, Inputs grads) -> Expected<Arrays> {
    LOOM_RETURN_IF_ERROR(expect_arity(in, 1, 1, "cumsum"));
    LOOM_ASSIGN_OR_RETURN(std::size_t dim, scanned_dim(ctx, in[0]));
    LOOM_ASSIGN_OR_RETURN(const NdArray* g, single_grad(grads, in[0].shape, "cumsum"));
    return Arrays{running_sum(*g, dim, true)};
  };
  return k;
}

}  // namespace

void register_scan_kernels(KernelRegistry& r) { r.add("cumsum", cumsum_kernel()); }

}  // namespace loom::verify
