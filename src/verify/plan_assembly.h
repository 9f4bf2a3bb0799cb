// Private to the plan interpreter: reading a SubTensor's local values, either as a strided box of a
// whole array (leaves) or assembled from the pieces that sub-ops wrote (produced tensors).
#pragma once

#include <span>
#include <string_view>

#include "loom/plan/sub_tensor.h"
#include "loom/verify/plan_interpreter.h"

namespace loom::verify::detail {

// The values of `box` (one strided range per dim) of a whole array, in row-major local order.
NdArray slice_strided(const NdArray& whole, std::span<const plan::IndexRange> box);

// The values of `consumer` from `pieces` of the same FullTensor: at each element, the fewest pieces
// whose value intervals tile [0, 1) (replicas: the first written), summed, then times the consumer's
// value fraction. Errors name `tensor_name` and the first element no tiling covers.
Expected<NdArray> assemble(const plan::SubTensor& consumer, std::span<const PlanPiece> pieces,
                           std::string_view tensor_name);

}  // namespace loom::verify::detail
