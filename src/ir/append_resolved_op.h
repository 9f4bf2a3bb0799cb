// Appending an op that the passes build themselves (seed, accumulate, optimizer steps): it is
// resolved through the catalog like a GraphBuilder op, so its annotation, shapes and dtypes are
// checked rather than trusted.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "loom/ir/graph.h"
#include "loom/ir/op_def.h"

namespace loom::ir {

// What the caller decides about an output tensor; shape and dtype come from the resolution.
struct OutputTensor {
  std::string name;
  TensorRole role = TensorRole::activation;
  TensorId owner;
  TensorId updates;
};

// `op` carries type, name, inputs, attrs and pass; its annotation and outputs are filled here.
// Returns the new output tensors, one per entry of `outputs` (their count must match the op's).
Expected<std::vector<TensorId>> append_resolved_op(Graph& graph, const OpCatalog& catalog, Op op,
                                                   std::span<const OutputTensor> outputs);

}  // namespace loom::ir
