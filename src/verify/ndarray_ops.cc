#include "loom/verify/ndarray_ops.h"

#include <algorithm>

namespace loom::verify {

void for_each_index(const ir::Shape& shape, const std::function<void(std::span<const std::int64_t>)>& visit) {
  const std::size_t rank = shape.rank();
  for (std::int64_t d : shape.dims)
    if (d <= 0) return;
  Index index(rank, 0);
  while (true) {
    visit(index);
    std::size_t k = rank;
    while (k > 0) {
      --k;
      if (++index[k] < shape.dims[k]) break;
      index[k] = 0;
      if (k == 0) return;
    }
    if (rank == 0) return;
  }
}

std::int64_t flat_offset(std::span<const std::int64_t> index, std::span<const std::int64_t> strides) {
  std::int64_t offset = 0;
  for (std::size_t k = 0; k < index.size(); ++k) offset += index[k] * strides[k];
  return offset;
}

std::int64_t global_flat_index(std::span<const std::int64_t> local_index, std::span<const std::int64_t> offsets,
                               const ir::Shape& full_shape) {
  std::int64_t flat = 0;
  for (std::size_t k = 0; k < local_index.size(); ++k) {
    const std::int64_t g = local_index[k] + (offsets.empty() ? 0 : offsets[k]);
    flat = flat * full_shape.dims[k] + g;
  }
  return flat;
}

Expected<ir::Shape> broadcast_shape(std::span<const ir::Shape> shapes, std::string_view op) {
  std::size_t rank = 0;
  for (const ir::Shape& s : shapes) rank = std::max(rank, s.rank());
  ir::Shape out(std::vector<std::int64_t>(rank, 1));
  for (const ir::Shape& s : shapes) {
    const std::size_t lead = rank - s.rank();
    for (std::size_t k = 0; k < s.rank(); ++k) {
      std::int64_t& o = out.dims[lead + k];
      if (s[k] == o || s[k] == 1) continue;
      if (o != 1) return failf("{}: shapes do not broadcast ({} against size {} at dim {})", op, s.to_string(), o, lead + k);
      o = s[k];
    }
  }
  return out;
}

std::vector<std::int64_t> broadcast_strides(const ir::Shape& shape, const ir::Shape& target) {
  const std::vector<std::int64_t> own = strides_of(shape);
  std::vector<std::int64_t> strides(target.rank(), 0);
  const std::size_t lead = target.rank() - shape.rank();
  for (std::size_t k = 0; k < shape.rank(); ++k) strides[lead + k] = shape[k] == 1 ? 0 : own[k];
  return strides;
}

Expected<NdArray> broadcast_map(std::span<const NdArray> inputs,
                                const std::function<double(std::span<const double>)>& f, std::string_view op) {
  std::vector<ir::Shape> shapes;
  for (const NdArray& a : inputs) shapes.push_back(a.shape);
  LOOM_ASSIGN_OR_RETURN(ir::Shape shape, broadcast_shape(shapes, op));
  std::vector<std::vector<std::int64_t>> strides;
  for (const NdArray& a : inputs) strides.push_back(broadcast_strides(a.shape, shape));
  NdArray out(shape);
  std::vector<double> args(inputs.size());
  std::size_t flat = 0;
  for_each_index(shape, [&](std::span<const std::int64_t> index) {
    for (std::size_t t = 0; t < inputs.size(); ++t)
      args[t] = inputs[t].data[static_cast<std::size_t>(flat_offset(index, strides[t]))];
    out.data[flat++] = f(args);
  });
  return out;
}

Expected<NdArray> broadcast_apply(const NdArray& a, const NdArray& b, const std::function<double(double, double)>& f,
                                  std::string_view op) {
  const NdArray pair[] = {a, b};
  return broadcast_map(pair, [&f](std::span<const double> v) { return f(v[0], v[1]); }, op);
}

NdArray map(const NdArray& x, const std::function<double(double)>& f) {
  NdArray out = x;
  for (double& v : out.data) v = f(v);
  return out;
}

Expected<NdArray> zip(const NdArray& a, const NdArray& b, const std::function<double(double, double)>& f,
                      std::string_view op) {
  LOOM_RETURN_IF_ERROR(expect_same_shape(a, b, op, "operands"));
  NdArray out(a.shape);
  for (std::size_t i = 0; i < a.data.size(); ++i) out.data[i] = f(a.data[i], b.data[i]);
  return out;
}

Expected<NdArray> sum_to_shape(const NdArray& grad, const ir::Shape& shape) {
  if (grad.shape == shape) return grad;
  const ir::Shape pair[] = {grad.shape, shape};
  LOOM_ASSIGN_OR_RETURN(ir::Shape common, broadcast_shape(pair, "sum_to_shape"));
  if (common != grad.shape)
    return failf("sum_to_shape: {} does not broadcast to the gradient's shape {}", shape.to_string(),
                 grad.shape.to_string());
  const std::vector<std::int64_t> strides = broadcast_strides(shape, grad.shape);
  NdArray out(shape);
  std::size_t flat = 0;
  for_each_index(grad.shape, [&](std::span<const std::int64_t> index) {
    out.data[static_cast<std::size_t>(flat_offset(index, strides))] += grad.data[flat++];
  });
  return out;
}

Expected<NdArray> permute(const NdArray& x, std::span<const std::size_t> perm) {
  const std::size_t rank = x.shape.rank();
  if (perm.size() != rank) return failf("permute: {} dims given for a tensor of rank {}", perm.size(), rank);
  std::vector<bool> seen(rank, false);
  for (std::size_t p : perm) {
    if (p >= rank || seen[p]) return fail("permute: the dims are not a permutation");
    seen[p] = true;
  }
  const std::vector<std::int64_t> in_strides = strides_of(x.shape);
  ir::Shape out_shape;
  std::vector<std::int64_t> read_strides;
  for (std::size_t p : perm) {
    out_shape.dims.push_back(x.shape[p]);
    read_strides.push_back(in_strides[p]);
  }
  NdArray out(out_shape);
  std::size_t flat = 0;
  for_each_index(out_shape, [&](std::span<const std::int64_t> index) {
    out.data[flat++] = x.data[static_cast<std::size_t>(flat_offset(index, read_strides))];
  });
  return out;
}

std::vector<std::size_t> inverse_permutation(std::span<const std::size_t> perm) {
  std::vector<std::size_t> inverse(perm.size());
  for (std::size_t k = 0; k < perm.size(); ++k) inverse[perm[k]] = k;
  return inverse;
}

Expected<NdArray> transpose_last2(const NdArray& x) {
  const std::size_t rank = x.shape.rank();
  if (rank < 2) return failf("transpose_last2: rank {} < 2", rank);
  std::vector<std::size_t> perm(rank);
  for (std::size_t k = 0; k < rank; ++k) perm[k] = k;
  std::swap(perm[rank - 1], perm[rank - 2]);
  return permute(x, perm);
}

Expected<NdArray> batched_matmul(const NdArray& a, const NdArray& b, bool transpose_a, bool transpose_b,
                                 std::string_view op) {
  const std::size_t ra = a.shape.rank(), rb = b.shape.rank();
  if (ra < 2 || rb < 2) return failf("{}: operands need rank >= 2, got {} and {}", op, a.shape.to_string(), b.shape.to_string());
  const std::int64_t m = transpose_a ? a.shape[ra - 1] : a.shape[ra - 2];
  const std::int64_t k = transpose_a ? a.shape[ra - 2] : a.shape[ra - 1];
  const std::int64_t kb = transpose_b ? b.shape[rb - 1] : b.shape[rb - 2];
  const std::int64_t n = transpose_b ? b.shape[rb - 2] : b.shape[rb - 1];
  if (k != kb)
    return failf("{}: contracted sizes differ ({} x {}{}{})", op, a.shape.to_string(), b.shape.to_string(),
                 transpose_a ? ", a transposed" : "", transpose_b ? ", b transposed" : "");
  const ir::Shape batch_a(std::vector<std::int64_t>(a.shape.dims.begin(), a.shape.dims.end() - 2));
  const ir::Shape batch_b(std::vector<std::int64_t>(b.shape.dims.begin(), b.shape.dims.end() - 2));
  const ir::Shape batches[] = {batch_a, batch_b};
  LOOM_ASSIGN_OR_RETURN(ir::Shape batch, broadcast_shape(batches, op));
  const std::vector<std::int64_t> sa = broadcast_strides(batch_a, batch), sb = broadcast_strides(batch_b, batch);
  // Element (i, j) of the (possibly transposed) matrix sits at i * row + j * col.
  const std::int64_t a_row = transpose_a ? 1 : k, a_col = transpose_a ? m : 1;
  const std::int64_t b_row = transpose_b ? 1 : n, b_col = transpose_b ? k : 1;
  ir::Shape out_shape = batch;
  out_shape.dims.push_back(m);
  out_shape.dims.push_back(n);
  NdArray out(out_shape);
  std::size_t block = 0;
  for_each_index(batch, [&](std::span<const std::int64_t> index) {
    const std::int64_t a0 = flat_offset(index, sa) * m * k, b0 = flat_offset(index, sb) * k * n;
    double* c = out.data.data() + block * static_cast<std::size_t>(m * n);
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t j = 0; j < n; ++j) {
        double sum = 0;
        for (std::int64_t p = 0; p < k; ++p)
          sum += a.data[static_cast<std::size_t>(a0 + i * a_row + p * a_col)] *
                 b.data[static_cast<std::size_t>(b0 + p * b_row + j * b_col)];
        c[i * n + j] = sum;
      }
    ++block;
  });
  return out;
}

namespace {
// Strides reading a reduced array (reduced dims removed or kept as 1) from an index of the full shape.
std::vector<std::int64_t> reduced_read_strides(const ir::Shape& x_shape, const std::vector<bool>& reduced) {
  ir::Shape kept_shape;
  for (std::size_t k = 0; k < x_shape.rank(); ++k) kept_shape.dims.push_back(reduced[k] ? 1 : x_shape[k]);
  std::vector<std::int64_t> strides = strides_of(kept_shape);
  for (std::size_t k = 0; k < x_shape.rank(); ++k)
    if (reduced[k]) strides[k] = 0;
  return strides;
}

ir::Shape reduced_shape(const ir::Shape& x_shape, const std::vector<bool>& reduced, bool keepdim) {
  ir::Shape out;
  for (std::size_t k = 0; k < x_shape.rank(); ++k) {
    if (!reduced[k])
      out.dims.push_back(x_shape[k]);
    else if (keepdim)
      out.dims.push_back(1);
  }
  return out;
}
}  // namespace

NdArray sum_over(const NdArray& x, const std::vector<bool>& reduced, bool keepdim) {
  NdArray out(reduced_shape(x.shape, reduced, keepdim));
  const std::vector<std::int64_t> strides = reduced_read_strides(x.shape, reduced);
  std::size_t flat = 0;
  for_each_index(x.shape, [&](std::span<const std::int64_t> index) {
    out.data[static_cast<std::size_t>(flat_offset(index, strides))] += x.data[flat++];
  });
  return out;
}

NdArray expand_over(const NdArray& reduced_value, const ir::Shape& x_shape, const std::vector<bool>& reduced) {
  NdArray out(x_shape);
  const std::vector<std::int64_t> strides = reduced_read_strides(x_shape, reduced);
  std::size_t flat = 0;
  for_each_index(x_shape, [&](std::span<const std::int64_t> index) {
    out.data[flat++] = reduced_value.data[static_cast<std::size_t>(flat_offset(index, strides))];
  });
  return out;
}

void for_each_lane(const ir::Shape& shape, std::size_t dim,
                   const std::function<void(std::int64_t base, std::int64_t stride)>& visit) {
  const std::vector<std::int64_t> strides = strides_of(shape);
  ir::Shape outer = shape;
  outer.dims[dim] = 1;
  for_each_index(outer, [&](std::span<const std::int64_t> index) { visit(flat_offset(index, strides), strides[dim]); });
}

NdArray slice_box(const NdArray& x, std::span<const std::int64_t> start, const ir::Shape& size) {
  const std::vector<std::int64_t> strides = strides_of(x.shape);
  const std::int64_t base = flat_offset(start, strides);
  NdArray out(size);
  std::size_t flat = 0;
  for_each_index(size, [&](std::span<const std::int64_t> index) {
    out.data[flat++] = x.data[static_cast<std::size_t>(base + flat_offset(index, strides))];
  });
  return out;
}

void add_into_box(NdArray& target, std::span<const std::int64_t> start, const NdArray& values) {
  const std::vector<std::int64_t> strides = strides_of(target.shape);
  const std::int64_t base = flat_offset(start, strides);
  std::size_t flat = 0;
  for_each_index(values.shape, [&](std::span<const std::int64_t> index) {
    target.data[static_cast<std::size_t>(base + flat_offset(index, strides))] += values.data[flat++];
  });
}

Expected<void> expect_arity(std::span<const NdArray> inputs, std::size_t min, std::size_t max, std::string_view op) {
  if (inputs.size() < min || inputs.size() > max) {
    if (min == max) return failf("{}: expects {} inputs, got {}", op, min, inputs.size());
    return failf("{}: expects {} to {} inputs, got {}", op, min, max, inputs.size());
  }
  return {};
}

Expected<void> expect_same_shape(const NdArray& a, const NdArray& b, std::string_view op, std::string_view what) {
  if (a.shape != b.shape)
    return failf("{}: {} must have the same shape, got {} and {}", op, what, a.shape.to_string(), b.shape.to_string());
  return {};
}

Expected<std::size_t> resolve_dim(std::int64_t dim, std::size_t rank, std::string_view op) {
  const auto r = static_cast<std::int64_t>(rank);
  const std::int64_t d = dim < 0 ? dim + r : dim;
  if (d < 0 || d >= r) return failf("{}: dim {} is out of range for rank {}", op, dim, rank);
  return static_cast<std::size_t>(d);
}

}  // namespace loom::verify
