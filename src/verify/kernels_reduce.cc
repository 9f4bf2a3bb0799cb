// Reductions over the 'dims' attr (every dim when absent), optionally keeping them as size 1.
// mean divides by the FullTensor's count over the reduced dims, not the shard's: a shard of a split
// reduced dim then yields a partial mean, and the shards' value parts add up to the true mean.
// max and amax send the gradient to the maxima, shared evenly among ties (torch.amax's rule).
#include <cmath>

#include "kernel_support.h"
#include "loom/verify/kernel_families.h"

namespace loom::verify {
namespace {

using namespace detail;

struct Reduction {
  std::vector<bool> reduced;
  bool keepdim = false;
};

Expected<Reduction> reduction(const ir::Attrs& attrs, const NdArray& x, std::string_view op) {
  const std::size_t rank = x.shape.rank();
  Reduction r{std::vector<bool>(rank, !attrs.contains("dims")), false};
  LOOM_ASSIGN_OR_RETURN(r.keepdim, attr(ir::get_bool_or(attrs, "keepdim", false), op));
  if (!attrs.contains("dims")) return r;
  LOOM_ASSIGN_OR_RETURN(std::vector<std::int64_t> dims, attr(ir::get_int_list(attrs, "dims"), op));
  if (dims.empty()) return failf("{}: 'dims' is empty", op);
  for (std::int64_t d : dims) {
    LOOM_ASSIGN_OR_RETURN(std::size_t axis, resolve_dim(d, rank, op));
    if (r.reduced[axis]) return failf("{}: dim {} appears twice in 'dims'", op, d);
    r.reduced[axis] = true;
  }
  return r;
}

ir::Shape reduced_shape(const ir::Shape& x, const Reduction& r) {
  ir::Shape out;
  for (std::size_t k = 0; k < x.rank(); ++k)
    if (!r.reduced[k]) out.dims.push_back(x[k]);
    else if (r.keepdim) out.dims.push_back(1);
  return out;
}

// sum (divisor 1) or mean (divisor = the full count over the reduced dims).
Kernel linear_reduction(std::string op, bool mean) {
  const auto divisor = [mean](const KernelContext& ctx, Inputs in, const Reduction& r) {
    return mean ? static_cast<double>(full_count(ctx, in, 0, r.reduced)) : 1.0;
  };
  Kernel k;
  k.forward = [op, divisor](const KernelContext& ctx, Inputs in) -> Expected<Arrays> {
    LOOM_RETURN_IF_ERROR(expect_arity(in, 1, 1, op));
    LOOM_ASSIGN_OR_RETURN(Reduction r, reduction(ctx.attrs, in[0], op));
    const double d = divisor(ctx, in, r);
    return Arrays{map(sum_over(in[0], r.reduced, r.keepdim), [d](double v) { return v / d; })};
  };
  k.backward = [op, divisor](const KernelContext& ctx, Inputs in, Inputs, Inputs grads) -> Expected<Arrays> {
    LOOM_RETURN_IF_ERROR(expect_arity(in, 1, 1, op));
    LOOM_ASSIGN_OR_RETURN(Reduction r, reduction(ctx.attrs, in[0], op));
    LOOM_ASSIGN_OR_RETURN(const NdArray* g, single_grad(grads, reduced_shape(in[0].shape, r), op));
    const double d = divisor(ctx, in, r);
    return Arrays{map(expand_over(*g, in[0].shape, r.reduced), [d](double v) { return v / d; })};
  };
  return k;
}

Kernel max_reduction(std::string op) {
  Kernel k;
  k.forward = [op](const KernelContext& ctx, Inputs in) -> Expected<Arrays> {
    LOOM_RETURN_IF_ERROR(expect_arity(in, 1, 1, op));
    LOOM_ASSIGN_OR_RETURN(Reduction r, reduction(ctx.attrs, in[0], op));
    if (in[0].numel() == 0) return failf("{}: maximum of an empty tensor", op);
    NdArray y(reduced_shape(in[0].shape, r), -INFINITY);
    // Each element's output slot: the slot numbers expanded over the reduced dims.
    std::vector<double> slots(y.data.size());
    for (std::size_t s = 0; s < slots.size(); ++s) slots[s] = static_cast<double>(s);
    const NdArray position = expand_over(NdArray(y.shape, slots), in[0].shape, r.reduced);
    for (std::size_t i = 0; i < in[0].data.size(); ++i) {
      double& slot = y.data[static_cast<std::size_t>(position.data[i])];
      slot = std::max(slot, in[0].data[i]);
    }
    return Arrays{std::move(y)};
  };
  k.backward = [op](const KernelContext& ctx, Inputs in, Inputs out, Inputs grads) -> Expected<Arrays> {
    LOOM_RETURN_IF_ERROR(expect_arity(in, 1, 1, op));
    LOOM_ASSIGN_OR_RETURN(Reduction r, reduction(ctx.attrs, in[0], op));
    const ir::Shape shape = reduced_shape(in[0].shape, r);
    if (out.size() != 1 || out[0].shape != shape) return failf("{}: backward needs the forward output", op);
    LOOM_ASSIGN_OR_RETURN(const NdArray* g, single_grad(grads, shape, op));
    const NdArray peak = expand_over(out[0], in[0].shape, r.reduced);
    NdArray is_max(in[0].shape);
    for (std::size_t i = 0; i < is_max.data.size(); ++i) is_max.data[i] = in[0].data[i] == peak.data[i] ? 1.0 : 0.0;
    const NdArray ties = expand_over(sum_over(is_max, r.reduced, r.keepdim), in[0].shape, r.reduced);
    const NdArray upstream = expand_over(*g, in[0].shape, r.reduced);
    NdArray dx(in[0].shape);
    for (std::size_t i = 0; i < dx.data.size(); ++i) dx.data[i] = is_max.data[i] * upstream.data[i] / ties.data[i];
    return Arrays{std::move(dx)};
  };
  return k;
}

// Index of the first maximum along 'dim', or in the flattened tensor when 'dim' is absent.
Kernel argmax_kernel() {
  Kernel k;
  k.forward = [](const KernelContext& ctx, Inputs in) -> Expected<Arrays> {
    LOOM_RETURN_IF_ERROR(expect_arity(in, 1, 1, "argmax"));
    LOOM_ASSIGN_OR_RETURN(bool keepdim, attr(ir::get_bool_or(ctx.attrs, "keepdim", false), "argmax"));
    const NdArray& x = in[0];
    if (x.numel() == 0) return fail("argmax: argmax of an empty tensor");
    if (!ctx.attrs.contains("dim")) {
      std::size_t best = 0;
      for (std::size_t i = 1; i < x.data.size(); ++i)
        if (x.data[i] > x.data[best]) best = i;
      ir::Shape shape;
      if (keepdim) shape.dims.assign(x.shape.rank(), 1);
      return Arrays{NdArray(shape, static_cast<double>(best))};
    }
    LOOM_ASSIGN_OR_RETURN(std::int64_t dim_attr, attr(ir::get_int(ctx.attrs, "dim"), "argmax"));
    LOOM_ASSIGN_OR_RETURN(std::size_t dim, resolve_dim(dim_attr, x.shape.rank(), "argmax"));
    ir::Shape shape = x.shape;
    if (keepdim) shape.dims[dim] = 1;
    else shape.dims.erase(shape.dims.begin() + static_cast<std::ptrdiff_t>(dim));
    NdArray y(shape);
    std::size_t lane = 0;
    for_each_lane(x.shape, dim, [&](std::int64_t base, std::int64_t stride) {
      std::int64_t best = 0;
      for (std::int64_t j = 1; j < x.shape[dim]; ++j)
        if (x.data[static_cast<std::size_t>(base + j * stride)] > x.data[static_cast<std::size_t>(base + best * stride)]) best = j;
      y.data[lane++] = static_cast<double>(best);
    });
    return Arrays{std::move(y)};
  };
  return k;
}

}  // namespace

void register_reduce_kernels(KernelRegistry& r) {
  r.add("sum", linear_reduction("sum", false));
  r.add("mean", linear_reduction("mean", true));
  r.add("max", max_reduction("max"));
  r.add("amax", max_reduction("amax"));
  r.add("argmax", argmax_kernel());
}

}  // namespace loom::verify
