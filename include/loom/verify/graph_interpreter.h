// Runs a training Graph on one device in float64 with the reference kernels: forward, backward and
// optimizer ops in program order. The ground truth every parallel plan is compared against.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "loom/core/error.h"
#include "loom/ir/graph.h"
#include "loom/verify/kernels.h"

namespace loom::verify {

// Deterministic inputs and parameters for a graph: floating tensors uniform in [-scale, scale] from a
// counter-based generator keyed by (seed, tensor name, element index), integer inputs (ids, labels) in
// [0, bound) where bound is the size of the dim they index (the vocabulary), optimizer states zero
// (master copies equal their parameter), derived inputs computed from the drawn ones (fill_derived_inputs).
std::vector<NdArray> initial_values(const ir::Graph& graph, std::uint64_t seed, double scale = 0.5);

// Sets every derived input (ir/derived_input.h) from the values of the input it derives from, as the
// runtime does from the whole batch: after changing an input (labels with ignored tokens), call it again.
void fill_derived_inputs(const ir::Graph& graph, std::vector<NdArray>& values);

// Values of every tensor after running every op; `values` holds the graph's leaves on entry
// (inputs, parameters, buffers, optimizer states; other entries are ignored). Errors name the op.
Expected<std::vector<NdArray>> run_graph(const ir::Graph& graph, std::vector<NdArray> values,
                                         const KernelRegistry& kernels = reference_kernels());

}  // namespace loom::verify
