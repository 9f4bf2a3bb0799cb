// Private helpers shared by the reference kernel families: attribute access whose errors name the op,
// the split-aware view of a KernelContext, and registration shorthands for elementwise ops.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "loom/verify/kernels.h"
#include "loom/verify/ndarray_ops.h"

namespace loom::verify::detail {

using Arrays = std::vector<NdArray>;
using Inputs = std::span<const NdArray>;

// Prefixes an attribute error with the op type.
template <class T>
Expected<T> attr(Expected<T> value, std::string_view op) {
  if (!value) return fail(fmt::format("{}: {}", op, value.error().message), value.error().hint);
  return value;
}

// The FullTensor shape of input i (the local shape when the context gives none).
inline const ir::Shape& full_input_shape(const KernelContext& ctx, Inputs inputs, std::size_t i) {
  return i < ctx.input_full_shapes.size() ? ctx.input_full_shapes[i] : inputs[i].shape;
}
inline std::span<const std::int64_t> input_offset(const KernelContext& ctx, std::size_t i) {
  if (i < ctx.input_offsets.size()) return ctx.input_offsets[i];
  return {};
}

// Element count of the FullTensor behind input i over the dims flagged in `dims` (all when empty):
// mean-like reductions divide by it so that the partial results of a split add up to the whole.
inline std::int64_t full_count(const KernelContext& ctx, Inputs inputs, std::size_t i, const std::vector<bool>& dims = {}) {
  const ir::Shape& shape = full_input_shape(ctx, inputs, i);
  std::int64_t count = 1;
  for (std::size_t k = 0; k < shape.rank(); ++k)
    if (dims.empty() || dims[k]) count *= shape[k];
  return count;
}

// Gradient of one output of a single-output op; errors name the op.
inline Expected<const NdArray*> single_grad(std::span<const NdArray> grad_outputs, const ir::Shape& shape,
                                            std::string_view op) {
  if (grad_outputs.size() != 1) return failf("{}: backward expects 1 output gradient, got {}", op, grad_outputs.size());
  if (grad_outputs[0].shape != shape)
    return failf("{}: output gradient has shape {}, expected {}", op, grad_outputs[0].shape.to_string(), shape.to_string());
  return &grad_outputs[0];
}

}  // namespace loom::verify::detail
