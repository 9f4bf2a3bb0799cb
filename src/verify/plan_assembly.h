// Private to the interpreters: reading a SubTensor's local values, either as a strided box of a whole
// array (leaves) or assembled from the pieces that sub-ops wrote (produced tensors).
#pragma once

#include <span>
#include <string_view>
#include <vector>

#include "loom/ir/graph.h"
#include "loom/plan/sub_tensor.h"
#include "loom/verify/plan_interpreter.h"

namespace loom::verify::detail {

// The values of `box` (one strided range per dim) of a whole array, in row-major local order.
NdArray slice_strided(const NdArray& whole, std::span<const plan::IndexRange> box);

// A leaf's SubTensor: its box of the leaf's initial value, times its value fraction (part k of n holds
// whole / n, e.g. a bias added once across a reduction split). Errors: no initial value of its shape.
Expected<NdArray> read_leaf(const ir::Graph& graph, const std::vector<NdArray>& initial, const plan::SubTensor& leaf);

// Whether a piece's box holds global index `at`, and where in the piece's local array it is (only when
// it holds it).
bool holds(const plan::SubTensor& piece, std::span<const std::int64_t> at);
std::size_t local_flat(const plan::SubTensor& piece, std::span<const std::int64_t> at);

// Which value interval the pieces at an element must tile.
enum class Tiling : std::uint8_t {
  whole,         // [0, 1), then the sum times the consumer's fraction: any complete decomposition
  whole_or_part, // as `whole`; failing that, the consumer's own interval, summed as is (ExecPlan combine)
};

// The values of `consumer` from `pieces` of the same FullTensor: at each element, the fewest pieces
// whose value intervals tile the interval `tiling` asks for (replicas: the first written), summed.
// Errors name `tensor_name` and the first element no tiling covers.
Expected<NdArray> assemble(const plan::SubTensor& consumer, std::span<const PlanPiece> pieces, std::string_view tensor_name,
                           Tiling tiling = Tiling::whole);

// Every tensor's value after a run, by TensorId: leaves copied from `initial`, produced tensors
// assembled whole from `pieces` (by TensorId). Errors: a produced tensor not covered.
Expected<std::vector<NdArray>> assemble_values(const ir::Graph& graph, const std::vector<NdArray>& initial,
                                               std::span<const std::vector<PlanPiece>> pieces);

}  // namespace loom::verify::detail
