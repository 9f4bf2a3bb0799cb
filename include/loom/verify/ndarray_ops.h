// Building blocks for the reference kernels: multi-index iteration, numpy broadcasting, reducing a
// broadcast gradient back to its input's shape, permutes, batched matmul, lane-wise (per-dim) loops.
// Everything is naive and float64: kernels trade speed for being obviously right.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string_view>
#include <vector>

#include "loom/core/error.h"
#include "loom/verify/ndarray.h"

namespace loom::verify {

using Index = std::vector<std::int64_t>;

// Calls `visit(index)` for every multi-index of `shape` in row-major order (once, with an empty index,
// for a scalar; never for a shape with a zero dim).
void for_each_index(const ir::Shape& shape, const std::function<void(std::span<const std::int64_t>)>& visit);

// Flat position of `index` under `strides` (strides may be 0 on broadcast dims).
std::int64_t flat_offset(std::span<const std::int64_t> index, std::span<const std::int64_t> strides);

// The row-major flat index of a local element in its FullTensor: local index + offsets, flattened with
// the full shape. Empty offsets/full_shape mean "the local array is the whole tensor".
std::int64_t global_flat_index(std::span<const std::int64_t> local_index, std::span<const std::int64_t> offsets,
                               const ir::Shape& full_shape);

// numpy broadcast of several shapes (aligned on the right, size-1 dims stretch); the error names `op`.
Expected<ir::Shape> broadcast_shape(std::span<const ir::Shape> shapes, std::string_view op);

// Strides that read `shape` as if broadcast to `target`: 0 on stretched and missing leading dims.
std::vector<std::int64_t> broadcast_strides(const ir::Shape& shape, const ir::Shape& target);

// out = f(inputs...) elementwise after broadcasting every input to the common shape.
Expected<NdArray> broadcast_map(std::span<const NdArray> inputs,
                                const std::function<double(std::span<const double>)>& f, std::string_view op);
// Binary convenience form of broadcast_map.
Expected<NdArray> broadcast_apply(const NdArray& a, const NdArray& b, const std::function<double(double, double)>& f,
                                  std::string_view op);

// out[i] = f(x[i]), same shape.
NdArray map(const NdArray& x, const std::function<double(double)>& f);
// out[i] = f(a[i], b[i]); a and b must have the same shape (error names `op`).
Expected<NdArray> zip(const NdArray& a, const NdArray& b, const std::function<double(double, double)>& f,
                      std::string_view op);

// The gradient of an input that was broadcast to `grad.shape`: sums over the stretched and the
// missing leading dims so the result has `shape`. Fails if `shape` does not broadcast to grad's.
Expected<NdArray> sum_to_shape(const NdArray& grad, const ir::Shape& shape);

// Output dim k is input dim perm[k] (torch.permute). Fails on a bad permutation.
Expected<NdArray> permute(const NdArray& x, std::span<const std::size_t> perm);
// The permutation that undoes `perm`.
std::vector<std::size_t> inverse_permutation(std::span<const std::size_t> perm);
// Swaps the last two dims (rank >= 2).
Expected<NdArray> transpose_last2(const NdArray& x);

// Batched matrix product over the last two dims; leading (batch) dims broadcast like numpy.
// a is [..., m, k] ([..., k, m] when transpose_a), b is [..., k, n] ([..., n, k] when transpose_b).
// Both need rank >= 2; the error names `op`.
Expected<NdArray> batched_matmul(const NdArray& a, const NdArray& b, bool transpose_a = false,
                                 bool transpose_b = false, std::string_view op = "matmul");

// Sums over the dims marked in `reduced` (one flag per dim), keeping them as size 1 when `keepdim`.
NdArray sum_over(const NdArray& x, const std::vector<bool>& reduced, bool keepdim);
// Broadcasts a reduction's result (or its gradient) back over the reduced dims: `reduced_value` has
// `x_shape` with the reduced dims removed (or kept as 1); the result has `x_shape`.
NdArray expand_over(const NdArray& reduced_value, const ir::Shape& x_shape, const std::vector<bool>& reduced);

// Calls `visit(base, stride)` for every lane along `dim`: the lane's elements are at base + j * stride,
// j in [0, shape[dim]). Used by softmax, norms, losses: anything normalizing along one dim.
void for_each_lane(const ir::Shape& shape, std::size_t dim,
                   const std::function<void(std::int64_t base, std::int64_t stride)>& visit);

// Copies x[box] where box is [start[k], start[k] + size[k]) per dim; and the reverse, adding.
NdArray slice_box(const NdArray& x, std::span<const std::int64_t> start, const ir::Shape& size);
void add_into_box(NdArray& target, std::span<const std::int64_t> start, const NdArray& values);

// Shape and arity checks whose errors name the op.
Expected<void> expect_arity(std::span<const NdArray> inputs, std::size_t min, std::size_t max, std::string_view op);
Expected<void> expect_same_shape(const NdArray& a, const NdArray& b, std::string_view op, std::string_view what);
// Python-style dim index (negative counts from the end).
Expected<std::size_t> resolve_dim(std::int64_t dim, std::size_t rank, std::string_view op);

}  // namespace loom::verify
