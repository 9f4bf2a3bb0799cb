// Derived inputs (FullTensor::derived): inputs whose provider computes them from another input of the
// same step. The one kind, counted_tokens, is the number of a loss's labels that count (not
// ignore_index): torch's mean over counted tokens divides by it, and it is a whole-batch number that no
// shard of the batch can see, so it cannot be an op over the split labels (a micro-batch's loss would
// wait for every micro-batch's labels, which deadlocks 1F1B). The interpreter (verify::initial_values)
// and the runtime (python/loom/runtime/runtime.py) both compute it with this rule from the whole labels.
#pragma once

#include <span>

#include "loom/core/error.h"
#include "loom/ir/graph.h"

namespace loom::ir {

// Checks every derived input: a scalar floating input whose `from` is another, integer, non-derived
// input, and whose window (trim) has one {front, back} pair of non-negative sizes per dim of `from`
// leaving at least one element. Errors name the tensor and the field "derived".
Expected<void> check_derived_inputs(const Graph& graph);

// counted_tokens of `from`'s whole value (row-major, `from_shape`): the elements inside the window
// that are not ignore_index.
double counted_tokens(const DerivedInput& derived, const Shape& from_shape, std::span<const double> labels);

}  // namespace loom::ir
