// index_select: out[..., j, ...] = x[..., index[j], ...] along `dim`. The backward scatter-adds the
// output gradient into x's shape (an index may repeat); the integer index gets no gradient.
#include <cmath>

#include "kernel_support.h"
#include "loom/verify/kernel_families.h"

namespace loom::verify {
namespace {

using namespace detail;

struct Selection {
  std::size_t dim = 0;
  std::vector<std::int64_t> rows;  // index values, checked against x's size along dim
};

Expected<Selection> selection(const KernelContext& ctx, Inputs in) {
  LOOM_RETURN_IF_ERROR(expect_arity(in, 2, 2, "index_select"));
  if (in[1].shape.rank() != 1) return failf("index_select: index has shape {}, expected 1-D", in[1].shape.to_string());
  LOOM_ASSIGN_OR_RETURN(std::int64_t dim, attr(ir::get_int(ctx.attrs, "dim"), "index_select"));
  Selection s;
  LOOM_ASSIGN_OR_RETURN(s.dim, resolve_dim(dim, in[0].shape.rank(), "index_select"));
  const std::int64_t size = in[0].shape[s.dim];
  for (double v : in[1].data) {
    const auto row = static_cast<std::int64_t>(std::llround(v));
    if (row < 0 || row >= size) return failf("index_select: index {} is outside [0, {}) along dim {}", row, size, s.dim);
    s.rows.push_back(row);
  }
  return s;
}

ir::Shape selected_shape(const ir::Shape& x, const Selection& s) {
  ir::Shape out = x;
  out.dims[s.dim] = static_cast<std::int64_t>(s.rows.size());
  return out;
}

// Visits every (output element, x element) pair the selection links.
void for_each_pair(const ir::Shape& x_shape, const ir::Shape& out_shape, const Selection& s,
                   const std::function<void(std::size_t out_at, std::size_t x_at)>& visit) {
  const std::vector<std::int64_t> x_strides = strides_of(x_shape), out_strides = strides_of(out_shape);
  std::vector<std::int64_t> source;
  for_each_index(out_shape, [&](std::span<const std::int64_t> index) {
    source.assign(index.begin(), index.end());
    source[s.dim] = s.rows[static_cast<std::size_t>(index[s.dim])];
    visit(static_cast<std::size_t>(flat_offset(index, out_strides)), static_cast<std::size_t>(flat_offset(source, x_strides)));
  });
}

Kernel index_select_kernel() {
  Kernel k;
  k.forward = [](const KernelContext& ctx, Inputs in) -> Expected<Arrays> {
    LOOM_ASSIGN_OR_RETURN(Selection s, selection(ctx, in));
    NdArray y(selected_shape(in[0].shape, s));
    for_each_pair(in[0].shape, y.shape, s, [&](std::size_t out_at, std::size_t x_at) { y.data[out_at] = in[0].data[x_at]; });
    return Arrays{std::move(y)};
  };
  k.backward = [](const KernelContext& ctx, Inputs in, Inputs, Inputs grads) -> Expected<Arrays> {
    LOOM_ASSIGN_OR_RETURN(Selection s, selection(ctx, in));
    LOOM_ASSIGN_OR_RETURN(const NdArray* g, single_grad(grads, selected_shape(in[0].shape, s), "index_select"));
    NdArray dx(in[0].shape);
    for_each_pair(in[0].shape, g->shape, s, [&](std::size_t out_at, std::size_t x_at) { dx.data[x_at] += g->data[out_at]; });
    return Arrays{std::move(dx), NdArray{}};
  };
  return k;
}

}  // namespace

void register_gather_kernels(KernelRegistry& r) { r.add("index_select", index_select_kernel()); }

}  // namespace loom::verify
