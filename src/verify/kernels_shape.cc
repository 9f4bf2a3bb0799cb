// Data movement. Reshape-like ops keep the row-major data and change the shape (their backward
// reshapes the gradient back); the others move elements with permute, box copies or broadcasting.
#include <algorithm>

#include "kernel_support.h"
#include "loom/ops/reshape_signature.h"
#include "loom/verify/kernel_families.h"

namespace loom::verify {
namespace {

using namespace detail;
using ShapeFn = std::function<Expected<ir::Shape>(const KernelContext&, const NdArray& x, const ir::Shape& full_x)>;

// An op whose output is its input's data under another shape.
Kernel view_like(std::string op, ShapeFn output_shape) {
  Kernel k;
  k.forward = [op, output_shape](const KernelContext& ctx, Inputs in) -> Expected<Arrays> {
    LOOM_RETURN_IF_ERROR(expect_arity(in, 1, 1, op));
    LOOM_ASSIGN_OR_RETURN(ir::Shape shape, output_shape(ctx, in[0], full_input_shape(ctx, in, 0)));
    if (shape.numel() != in[0].numel())
      return failf("{}: cannot give {} the shape {}", op, in[0].shape.to_string(), shape.to_string());
    return Arrays{NdArray(std::move(shape), in[0].data)};
  };
  k.backward = [op](const KernelContext&, Inputs in, Inputs, Inputs grads) -> Expected<Arrays> {
    LOOM_RETURN_IF_ERROR(expect_arity(in, 1, 1, op));
    if (grads.size() != 1 || grads[0].numel() != in[0].numel()) return failf("{}: backward expects 1 output gradient of {} elements", op, in[0].numel());
    return Arrays{NdArray(in[0].shape, grads[0].data)};
  };
  return k;
}

// The local target of a reshape of a shard. The annotation groups the dims into runs of equal
// product and lets a plan split only a run's outermost dim, so a shard keeps every run but the
// outermost output dim of each run shrinks with it.
Expected<ir::Shape> local_reshape_target(const ir::Shape& full_from, const ir::Shape& full_to, const ir::Shape& local_from,
                                         std::string_view op) {
  if (local_from == full_from) return full_to;
  ir::Shape to = full_to;
  std::vector<std::size_t> in_axes, out_axes;
  for (std::size_t k = 0; k < full_from.rank(); ++k)
    if (full_from[k] != 1) in_axes.push_back(k);
  for (std::size_t k = 0; k < full_to.rank(); ++k)
    if (full_to[k] != 1) out_axes.push_back(k);
  std::size_t i = 0, j = 0;
  while (i < in_axes.size() && j < out_axes.size()) {
    std::size_t i_end = i + 1, j_end = j + 1;
    std::int64_t in_product = full_from[in_axes[i]], out_product = full_to[out_axes[j]];
    while (in_product != out_product) {
      if (in_product < out_product) in_product *= full_from[in_axes[i_end++]];
      else out_product *= full_to[out_axes[j_end++]];
    }
    std::int64_t local_product = 1, inner = 1;
    for (std::size_t a = i; a < i_end; ++a) local_product *= local_from[in_axes[a]];
    for (std::size_t b = j + 1; b < j_end; ++b) inner *= full_to[out_axes[b]];
    if (local_product % inner != 0)
      return failf("{}: a shard of shape {} of {} does not reshape to a part of {}", op, local_from.to_string(),
                   full_from.to_string(), full_to.to_string());
    to.dims[out_axes[j]] = local_product / inner;
    i = i_end;
    j = j_end;
  }
  return to;
}

ShapeFn reshape_shape(std::string op) {
  return [op](const KernelContext& ctx, const NdArray& x, const ir::Shape& full_x) -> Expected<ir::Shape> {
    LOOM_ASSIGN_OR_RETURN(std::vector<std::int64_t> target, attr(ir::get_int_list(ctx.attrs, "shape"), op));
    LOOM_ASSIGN_OR_RETURN(ir::Shape full_to, ops::resolve_target_shape(full_x, target, op));
    if (full_x.numel() != full_to.numel())
      return failf("{}: cannot reshape {} to {}", op, full_x.to_string(), full_to.to_string());
    return local_reshape_target(full_x, full_to, x.shape, op);
  };
}

Expected<ir::Shape> flatten_shape(const KernelContext& ctx, const NdArray& x, const ir::Shape&) {
  if (x.shape.rank() == 0) return ir::Shape{1};
  LOOM_ASSIGN_OR_RETURN(std::int64_t start_attr, attr(ir::get_int_or(ctx.attrs, "start_dim", 0), "flatten"));
  LOOM_ASSIGN_OR_RETURN(std::int64_t end_attr, attr(ir::get_int_or(ctx.attrs, "end_dim", -1), "flatten"));
  LOOM_ASSIGN_OR_RETURN(std::size_t start, resolve_dim(start_attr, x.shape.rank(), "flatten"));
  LOOM_ASSIGN_OR_RETURN(std::size_t end, resolve_dim(end_attr, x.shape.rank(), "flatten"));
  if (start > end) return failf("flatten: start_dim {} comes after end_dim {}", start_attr, end_attr);
  ir::Shape to;
  for (std::size_t k = 0; k < x.shape.rank(); ++k) {
    if (k <= start || k > end) to.dims.push_back(x.shape[k]);
    else to.dims.back() *= x.shape[k];
  }
  return to;
}

Expected<ir::Shape> unsqueeze_shape(const KernelContext& ctx, const NdArray& x, const ir::Shape&) {
  LOOM_ASSIGN_OR_RETURN(std::int64_t dim_attr, attr(ir::get_int(ctx.attrs, "dim"), "unsqueeze"));
  LOOM_ASSIGN_OR_RETURN(std::size_t dim, resolve_dim(dim_attr, x.shape.rank() + 1, "unsqueeze"));
  ir::Shape to = x.shape;
  to.dims.insert(to.dims.begin() + static_cast<std::ptrdiff_t>(dim), 1);
  return to;
}

// Without 'dim', drops the dims of size 1 in the FullTensor (a shard's dim of size 1 stays).
Expected<ir::Shape> squeeze_shape(const KernelContext& ctx, const NdArray& x, const ir::Shape& full_x) {
  ir::Shape to;
  if (ctx.attrs.contains("dim")) {
    LOOM_ASSIGN_OR_RETURN(std::int64_t dim_attr, attr(ir::get_int(ctx.attrs, "dim"), "squeeze"));
    LOOM_ASSIGN_OR_RETURN(std::size_t dim, resolve_dim(dim_attr, x.shape.rank(), "squeeze"));
    if (x.shape[dim] != 1) return failf("squeeze: dim {} of {} has size {}, not 1", dim_attr, x.shape.to_string(), x.shape[dim]);
    to = x.shape;
    to.dims.erase(to.dims.begin() + static_cast<std::ptrdiff_t>(dim));
    return to;
  }
  for (std::size_t k = 0; k < x.shape.rank(); ++k)
    if (full_x[k] != 1) to.dims.push_back(x.shape[k]);
  return to;
}

// Output dim k is input dim perm[k]; the backward applies the inverse permutation.
using PermFn = std::function<Expected<std::vector<std::size_t>>(const ir::Attrs&, std::size_t rank)>;

Kernel permuting(std::string op, PermFn perm_of) {
  Kernel k;
  k.forward = [op, perm_of](const KernelContext& ctx, Inputs in) -> Expected<Arrays> {
    LOOM_RETURN_IF_ERROR(expect_arity(in, 1, 1, op));
    LOOM_ASSIGN_OR_RETURN(std::vector<std::size_t> perm, perm_of(ctx.attrs, in[0].shape.rank()));
    LOOM_ASSIGN_OR_RETURN(NdArray y, permute(in[0], perm));
    return Arrays{std::move(y)};
  };
  k.backward = [op, perm_of](const KernelContext& ctx, Inputs in, Inputs, Inputs grads) -> Expected<Arrays> {
    LOOM_RETURN_IF_ERROR(expect_arity(in, 1, 1, op));
    if (grads.size() != 1) return failf("{}: backward expects 1 output gradient", op);
    LOOM_ASSIGN_OR_RETURN(std::vector<std::size_t> perm, perm_of(ctx.attrs, in[0].shape.rank()));
    LOOM_ASSIGN_OR_RETURN(NdArray dx, permute(grads[0], inverse_permutation(perm)));
    if (dx.shape != in[0].shape) return failf("{}: output gradient has the wrong shape", op);
    return Arrays{std::move(dx)};
  };
  return k;
}

Expected<std::vector<std::size_t>> transpose_perm(const ir::Attrs& attrs, std::size_t rank) {
  LOOM_ASSIGN_OR_RETURN(std::int64_t d0, attr(ir::get_int(attrs, "dim0"), "transpose"));
  LOOM_ASSIGN_OR_RETURN(std::int64_t d1, attr(ir::get_int(attrs, "dim1"), "transpose"));
  LOOM_ASSIGN_OR_RETURN(std::size_t a, resolve_dim(d0, rank, "transpose"));
  LOOM_ASSIGN_OR_RETURN(std::size_t b, resolve_dim(d1, rank, "transpose"));
  std::vector<std::size_t> perm(rank);
  for (std::size_t k = 0; k < rank; ++k) perm[k] = k;
  std::swap(perm[a], perm[b]);
  return perm;
}

Expected<std::vector<std::size_t>> permute_perm(const ir::Attrs& attrs, std::size_t rank) {
  LOOM_ASSIGN_OR_RETURN(std::vector<std::int64_t> dims, attr(ir::get_int_list(attrs, "dims"), "permute"));
  std::vector<std::size_t> perm;
  for (std::int64_t d : dims) {
    LOOM_ASSIGN_OR_RETURN(std::size_t axis, resolve_dim(d, rank, "permute"));
    perm.push_back(axis);
  }
  return perm;
}

// Parts along one dim: split (given sizes) and chunk (torch.chunk sizes).
using PartsFn = std::function<Expected<std::vector<std::int64_t>>(const ir::Attrs&, std::int64_t dim_size)>;

Expected<std::size_t> dim_attr(const ir::Attrs& attrs, std::size_t rank, std::string_view op, bool required) {
  LOOM_ASSIGN_OR_RETURN(std::int64_t dim, attr(required ? ir::get_int(attrs, "dim") : ir::get_int_or(attrs, "dim", 0), op));
  return resolve_dim(dim, rank, op);
}

Kernel splitting(std::string op, PartsFn parts_of) {
  Kernel k;
  k.forward = [op, parts_of](const KernelContext& ctx, Inputs in) -> Expected<Arrays> {
    LOOM_RETURN_IF_ERROR(expect_arity(in, 1, 1, op));
    LOOM_ASSIGN_OR_RETURN(std::size_t dim, dim_attr(ctx.attrs, in[0].shape.rank(), op, false));
    LOOM_ASSIGN_OR_RETURN(std::vector<std::int64_t> parts, parts_of(ctx.attrs, in[0].shape[dim]));
    Arrays outputs;
    std::vector<std::int64_t> start(in[0].shape.rank(), 0);
    for (std::int64_t part : parts) {
      ir::Shape size = in[0].shape;
      size.dims[dim] = part;
      outputs.push_back(slice_box(in[0], start, size));
      start[dim] += part;
    }
    return outputs;
  };
  k.backward = [op, parts_of](const KernelContext& ctx, Inputs in, Inputs, Inputs grads) -> Expected<Arrays> {
    LOOM_RETURN_IF_ERROR(expect_arity(in, 1, 1, op));
    LOOM_ASSIGN_OR_RETURN(std::size_t dim, dim_attr(ctx.attrs, in[0].shape.rank(), op, false));
    LOOM_ASSIGN_OR_RETURN(std::vector<std::int64_t> parts, parts_of(ctx.attrs, in[0].shape[dim]));
    if (grads.size() != parts.size()) return failf("{}: backward expects {} output gradients, got {}", op, parts.size(), grads.size());
    NdArray dx(in[0].shape);
    std::vector<std::int64_t> start(in[0].shape.rank(), 0);
    for (std::size_t p = 0; p < parts.size(); ++p) {
      ir::Shape size = in[0].shape;
      size.dims[dim] = parts[p];
      if (grads[p].shape != size) return failf("{}: gradient of part {} has shape {}, expected {}", op, p, grads[p].shape.to_string(), size.to_string());
      add_into_box(dx, start, grads[p]);
      start[dim] += parts[p];
    }
    return Arrays{std::move(dx)};
  };
  return k;
}

Expected<std::vector<std::int64_t>> split_parts(const ir::Attrs& attrs, std::int64_t n) {
  LOOM_ASSIGN_OR_RETURN(std::vector<std::int64_t> parts, attr(ir::get_int_list(attrs, "sizes"), "split"));
  std::int64_t total = 0;
  for (std::int64_t p : parts) {
    if (p <= 0) return failf("split: part size {} must be positive", p);
    total += p;
  }
  if (total != n) return failf("split: parts add up to {}, but the dim has size {}", total, n);
  return parts;
}

Expected<std::vector<std::int64_t>> chunk_parts(const ir::Attrs& attrs, std::int64_t n) {
  LOOM_ASSIGN_OR_RETURN(std::int64_t chunks, attr(ir::get_int(attrs, "chunks"), "chunk"));
  if (chunks <= 0) return failf("chunk: 'chunks' = {} must be positive", chunks);
  const std::int64_t size = (n + chunks - 1) / chunks;
  std::vector<std::int64_t> parts;
  for (std::int64_t left = n; left > 0; left -= size) parts.push_back(std::min(size, left));
  return parts;
}

Kernel concat_kernel() {
  Kernel k;
  k.forward = [](const KernelContext& ctx, Inputs in) -> Expected<Arrays> {
    if (in.empty()) return fail("concat: takes at least one input");
    LOOM_ASSIGN_OR_RETURN(std::size_t dim, dim_attr(ctx.attrs, in[0].shape.rank(), "concat", false));
    ir::Shape shape = in[0].shape;
    shape.dims[dim] = 0;
    for (const NdArray& part : in) {
      ir::Shape other = part.shape;
      if (other.rank() == shape.rank()) other.dims[dim] = 0;
      if (other != shape) return failf("concat: input {} does not match {} outside dim {}", part.shape.to_string(), in[0].shape.to_string(), dim);
    }
    for (const NdArray& part : in) shape.dims[dim] += part.shape[dim];
    NdArray y(shape);
    std::vector<std::int64_t> start(shape.rank(), 0);
    for (const NdArray& part : in) {
      add_into_box(y, start, part);
      start[dim] += part.shape[dim];
    }
    return Arrays{std::move(y)};
  };
  k.backward = [](const KernelContext& ctx, Inputs in, Inputs, Inputs grads) -> Expected<Arrays> {
    if (in.empty() || grads.size() != 1) return fail("concat: backward expects inputs and 1 output gradient");
    LOOM_ASSIGN_OR_RETURN(std::size_t dim, dim_attr(ctx.attrs, in[0].shape.rank(), "concat", false));
    Arrays result;
    std::vector<std::int64_t> start(in[0].shape.rank(), 0);
    for (const NdArray& part : in) {
      result.push_back(slice_box(grads[0], start, part.shape));
      start[dim] += part.shape[dim];
    }
    return result;
  };
  return k;
}

// Python slicing x[start:end:step] along dim (negative indices count from the end, bounds clamp).
struct SliceSpec {
  std::size_t dim;
  std::int64_t start, step, length;
};

Expected<SliceSpec> slice_spec(const ir::Attrs& attrs, const ir::Shape& x) {
  LOOM_ASSIGN_OR_RETURN(std::size_t dim, dim_attr(attrs, x.rank(), "slice", true));
  const std::int64_t n = x[dim];
  LOOM_ASSIGN_OR_RETURN(std::int64_t start, attr(ir::get_int_or(attrs, "start", 0), "slice"));
  LOOM_ASSIGN_OR_RETURN(std::int64_t end, attr(ir::get_int_or(attrs, "end", n), "slice"));
  LOOM_ASSIGN_OR_RETURN(std::int64_t step, attr(ir::get_int_or(attrs, "step", 1), "slice"));
  if (step <= 0) return failf("slice: step {} must be positive", step);
  const auto clamp_index = [n](std::int64_t i) { return std::clamp(i < 0 ? i + n : i, std::int64_t{0}, n); };
  start = clamp_index(start);
  end = clamp_index(end);
  const std::int64_t length = end > start ? (end - start + step - 1) / step : 0;
  if (length == 0) return failf("slice: [{}:{}:{}] of a dim of size {} is empty", start, end, step, n);
  return SliceSpec{dim, start, step, length};
}

// Calls visit(x_flat, y_flat) for every element the slice keeps.
void for_each_sliced(const ir::Shape& x, const SliceSpec& s, const std::function<void(std::size_t, std::size_t)>& visit) {
  ir::Shape y = x;
  y.dims[s.dim] = s.length;
  const std::vector<std::int64_t> strides = strides_of(x);
  std::size_t flat = 0;
  for_each_index(y, [&](std::span<const std::int64_t> index) {
    std::int64_t offset = flat_offset(index, strides) + (s.start + index[s.dim] * (s.step - 1)) * strides[s.dim];
    visit(static_cast<std::size_t>(offset), flat++);
  });
}

Kernel slice_kernel() {
  Kernel k;
  k.forward = [](const KernelContext& ctx, Inputs in) -> Expected<Arrays> {
    LOOM_RETURN_IF_ERROR(expect_arity(in, 1, 1, "slice"));
    LOOM_ASSIGN_OR_RETURN(SliceSpec s, slice_spec(ctx.attrs, in[0].shape));
    ir::Shape shape = in[0].shape;
    shape.dims[s.dim] = s.length;
    NdArray y(shape);
    for_each_sliced(in[0].shape, s, [&](std::size_t xi, std::size_t yi) { y.data[yi] = in[0].data[xi]; });
    return Arrays{std::move(y)};
  };
  k.backward = [](const KernelContext& ctx, Inputs in, Inputs, Inputs grads) -> Expected<Arrays> {
    LOOM_RETURN_IF_ERROR(expect_arity(in, 1, 1, "slice"));
    LOOM_ASSIGN_OR_RETURN(SliceSpec s, slice_spec(ctx.attrs, in[0].shape));
    ir::Shape shape = in[0].shape;
    shape.dims[s.dim] = s.length;
    LOOM_ASSIGN_OR_RETURN(const NdArray* g, single_grad(grads, shape, "slice"));
    NdArray dx(in[0].shape);
    for_each_sliced(in[0].shape, s, [&](std::size_t xi, std::size_t yi) { dx.data[xi] = g->data[yi]; });
    return Arrays{std::move(dx)};
  };
  return k;
}

// torch.Tensor.expand: dims of size 1 in the FullTensor grow to the target, -1 (or the same size)
// keeps a dim at its local size, new leading dims are added. The backward sums over the growth.
Expected<ir::Shape> expand_shape(const KernelContext& ctx, Inputs in) {
  LOOM_RETURN_IF_ERROR(expect_arity(in, 1, 1, "expand"));
  LOOM_ASSIGN_OR_RETURN(std::vector<std::int64_t> target, attr(ir::get_int_list(ctx.attrs, "shape"), "expand"));
  const ir::Shape& x = in[0].shape;
  const ir::Shape& full = full_input_shape(ctx, in, 0);
  if (target.size() < x.rank()) return failf("expand: target has {} dims, fewer than {}", target.size(), x.to_string());
  const std::size_t lead = target.size() - x.rank();
  ir::Shape out;
  for (std::size_t k = 0; k < target.size(); ++k) {
    const std::int64_t want = target[k];
    if (k < lead) {
      if (want <= 0) return failf("expand: new leading dim {} needs a positive size, got {}", k, want);
      out.dims.push_back(want);
      continue;
    }
    const std::int64_t have = x[k - lead], full_have = full[k - lead];
    if (want == -1 || want == full_have) out.dims.push_back(have);
    else if (full_have == 1 && want > 0) out.dims.push_back(want);
    else return failf("expand: dim {} of {} has size {} and cannot become {}", k - lead, x.to_string(), have, want);
  }
  return out;
}

Kernel expand_kernel() {
  Kernel k;
  k.forward = [](const KernelContext& ctx, Inputs in) -> Expected<Arrays> {
    LOOM_ASSIGN_OR_RETURN(ir::Shape shape, expand_shape(ctx, in));
    const NdArray operands[] = {in[0], NdArray(shape)};
    LOOM_ASSIGN_OR_RETURN(NdArray y, broadcast_map(operands, [](std::span<const double> v) { return v[0]; }, "expand"));
    return Arrays{std::move(y)};
  };
  k.backward = [](const KernelContext& ctx, Inputs in, Inputs, Inputs grads) -> Expected<Arrays> {
    LOOM_ASSIGN_OR_RETURN(ir::Shape shape, expand_shape(ctx, in));
    LOOM_ASSIGN_OR_RETURN(const NdArray* g, single_grad(grads, shape, "expand"));
    LOOM_ASSIGN_OR_RETURN(NdArray dx, sum_to_shape(*g, in[0].shape));
    return Arrays{std::move(dx)};
  };
  return k;
}

Expected<ir::Shape> same_shape(const KernelContext&, const NdArray& x, const ir::Shape&) { return x.shape; }

}  // namespace

void register_shape_kernels(KernelRegistry& r) {
  r.add("reshape", view_like("reshape", reshape_shape("reshape")));
  r.add("view", view_like("view", reshape_shape("view")));
  r.add("flatten", view_like("flatten", flatten_shape));
  r.add("unsqueeze", view_like("unsqueeze", unsqueeze_shape));
  r.add("squeeze", view_like("squeeze", squeeze_shape));
  r.add("contiguous", view_like("contiguous", same_shape));
  r.add("identity", view_like("identity", same_shape));
  r.add("transpose", permuting("transpose", transpose_perm));
  r.add("permute", permuting("permute", permute_perm));
  r.add("split", splitting("split", split_parts));
  r.add("chunk", splitting("chunk", chunk_parts));
  r.add("concat", concat_kernel());
  r.add("slice", slice_kernel());
  r.add("expand", expand_kernel());
  // Index-driven data movement, each in its own file (kernels_scan.cc, _gather.cc, _padding.cc, _resample.cc).
  register_scan_kernels(r);
  register_gather_kernels(r);
  register_routing_kernels(r);
  register_padding_kernels(r);
  register_resample_kernels(r);
}

}  // namespace loom::verify
