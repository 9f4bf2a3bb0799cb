// topk: per lane along `dim`, the k largest (smallest with largest=false) entries, in rank order,
// and their positions. Ties rank the lower position first (torch leaves the order of exact ties
// unspecified). The backward scatters the values' gradient to the positions picked; the positions
// (integers) carry none.
#include <algorithm>
#include <numeric>

#include "kernel_support.h"
#include "loom/verify/kernel_families.h"

namespace loom::verify {
namespace {

using namespace detail;

struct Ranking {
  std::size_t dim = 0;
  std::int64_t k = 0;
  bool largest = true;
};

Expected<Ranking> ranking(const KernelContext& ctx, Inputs in) {
  LOOM_RETURN_IF_ERROR(expect_arity(in, 1, 1, "topk"));
  Ranking r;
  LOOM_ASSIGN_OR_RETURN(std::int64_t dim, attr(ir::get_int_or(ctx.attrs, "dim", -1), "topk"));
  LOOM_ASSIGN_OR_RETURN(r.dim, resolve_dim(dim, in[0].shape.rank(), "topk"));
  LOOM_ASSIGN_OR_RETURN(r.k, attr(ir::get_int(ctx.attrs, "k"), "topk"));
  LOOM_ASSIGN_OR_RETURN(r.largest, attr(ir::get_bool_or(ctx.attrs, "largest", true), "topk"));
  if (r.k < 0 || r.k > in[0].shape[r.dim])
    return failf("topk: k {} is outside [0, {}] along dim {}", r.k, in[0].shape[r.dim], r.dim);
  return r;
}

// Visits every lane: (flat offsets of x's lane entries picked, in rank order; the output lane's base, stride).
void for_each_pick(const NdArray& x, const ir::Shape& out_shape, const Ranking& r,
                   const std::function<void(std::int64_t x_at, std::int64_t out_at, std::int64_t position)>& visit) {
  std::vector<std::int64_t> x_bases, out_bases;
  std::int64_t x_stride = 1, out_stride = 1;
  for_each_lane(x.shape, r.dim, [&](std::int64_t base, std::int64_t stride) { x_bases.push_back(base), x_stride = stride; });
  for_each_lane(out_shape, r.dim, [&](std::int64_t base, std::int64_t stride) { out_bases.push_back(base), out_stride = stride; });
  std::vector<std::int64_t> order(static_cast<std::size_t>(x.shape[r.dim]));
  for (std::size_t lane = 0; lane < x_bases.size(); ++lane) {
    const auto value = [&](std::int64_t j) { return x.data[static_cast<std::size_t>(x_bases[lane] + j * x_stride)]; };
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) {
      return r.largest ? value(a) > value(b) : value(a) < value(b);
    });
    for (std::int64_t j = 0; j < r.k; ++j)
      visit(x_bases[lane] + order[static_cast<std::size_t>(j)] * x_stride, out_bases[lane] + j * out_stride,
            order[static_cast<std::size_t>(j)]);
  }
}

ir::Shape picked_shape(const ir::Shape& x, const Ranking& r) {
  ir::Shape out = x;
  out.dims[r.dim] = r.k;
  return out;
}

Kernel topk_kernel() {
  Kernel k;
  k.forward = [](const KernelContext& ctx, Inputs in) -> Expected<Arrays> {
    LOOM_ASSIGN_OR_RETURN(Ranking r, ranking(ctx, in));
    NdArray values(picked_shape(in[0].shape, r)), positions(values.shape);
    for_each_pick(in[0], values.shape, r, [&](std::int64_t x_at, std::int64_t out_at, std::int64_t position) {
      values.data[static_cast<std::size_t>(out_at)] = in[0].data[static_cast<std::size_t>(x_at)];
      positions.data[static_cast<std::size_t>(out_at)] = static_cast<double>(position);
    });
    return Arrays{std::move(values), std::move(positions)};
  };
  // The gradients come for the outputs that have one: the values' first (the positions' too, ignored).
  k.backward = [](const KernelContext& ctx, Inputs in, Inputs, Inputs grads) -> Expected<Arrays> {
    LOOM_ASSIGN_OR_RETURN(Ranking r, ranking(ctx, in));
    const ir::Shape shape = picked_shape(in[0].shape, r);
    if (grads.empty() || grads[0].shape != shape)
      return failf("topk: backward needs the values' gradient {}", shape.to_string());
    NdArray dx(in[0].shape);
    for_each_pick(in[0], shape, r, [&](std::int64_t x_at, std::int64_t out_at, std::int64_t) {
      dx.data[static_cast<std::size_t>(x_at)] += grads[0].data[static_cast<std::size_t>(out_at)];
    });
    return Arrays{std::move(dx)};
  };
  return k;
}

}  // namespace

void register_routing_kernels(KernelRegistry& r) { r.add("topk", topk_kernel()); }

}  // namespace loom::verify
