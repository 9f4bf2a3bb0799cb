// Shared pieces for building per-instance annotations in op signatures: dimension names, canonical
// annotation text, argument checks with uniform messages, and numpy broadcasting.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "loom/core/error.h"
#include "loom/ir/dtype.h"
#include "loom/ir/op_def.h"
#include "loom/ir/shape.h"

namespace loom::ops {

// The dimension tokens of one tensor, e.g. {"b", "s", "h^"}; empty for a scalar.
using TensorDims = std::vector<std::string>;

// Canonical annotation text: single spaces, ", " between tensors, " -> " between the sides.
std::string annotation_text(const std::vector<TensorDims>& inputs, const std::vector<TensorDims>& outputs);

// {"d0", "d1", ...}: one identifier per dimension.
TensorDims indexed_dims(std::size_t rank, std::string_view prefix = "d");
// Appends a flag ('+' or '^') to every token of `dims`.
TensorDims flagged(TensorDims dims, char flag);
// Names of the token dims of [.., v] logits: "n" for one, "b s" for two, else d0 d1 ...
TensorDims token_dims(std::size_t count);
// The optional label_smoothing attribute of a loss must lie in [0, 1); errors name the op.
Expected<void> check_label_smoothing(const ir::OpCall& call, std::string_view op);
// A loss-family op definition (op class loss, backward at 1x the forward's FLOPs) whose inputs
// `no_grad` (labels, stabilisers) take no gradient.
ir::OpDef loss_op(std::string type, std::string summary, ir::SignatureFn signature, ir::CostFn flops,
                  std::vector<ir::AttrSpec> attrs, std::vector<int> no_grad);
// "a", "b", ..., "z", "a1", "b1", ...: short distinct names for generated identifiers.
std::string letter_name(std::size_t index);

// Python-style dimension index: -1 is the last; the error names the op and the valid range.
Expected<std::size_t> normalize_dim(std::int64_t dim, std::size_t rank, std::string_view op);

// The number of inputs must lie in [min, max]; `forms` lists the accepted inputs for the message.
Expected<void> expect_inputs(const ir::OpCall& call, std::size_t min, std::size_t max, std::string_view op,
                             std::string_view forms);
// Input `index` must have rank `rank`; `layout` names its dims for the message ("[b, h, s, d]").
Expected<void> expect_rank(const ir::OpCall& call, std::size_t index, std::size_t rank, std::string_view op,
                           std::string_view layout);
// Input `index` must hold integers (ids, labels).
Expected<void> expect_integer(const ir::OpCall& call, std::size_t index, std::string_view op, std::string_view role);
// Input `index` must hold booleans (masks).
Expected<void> expect_boolean(const ir::OpCall& call, std::size_t index, std::string_view op, std::string_view role);

// numpy broadcasting of several inputs: the output gets d0..d{r-1}; an input dim of size 1 facing a
// larger one becomes the number 1, and missing leading dims are omitted. E.g. [4, 1, 8] and [3, 8]:
// "d0 1 d2, d1 d2 -> d0 d1 d2".
struct Broadcast {
  std::vector<TensorDims> inputs;
  TensorDims output;
};
Expected<Broadcast> broadcast_dims(std::span<const ir::Shape> shapes, std::string_view op);

bool is_integer(ir::DType dtype);

}  // namespace loom::ops
