// Totals of a Graph that `loom graph` prints and tests check against closed-form formulas:
// op counts and FLOPs per pass, parameter count, and bytes per tensor role.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "loom/ir/graph.h"
#include "loom/ir/op_def.h"

namespace loom::ir {

struct GraphStats {
  std::array<std::size_t, 3> ops{};  // indexed by Pass
  std::array<double, 3> flops{};     // indexed by Pass; a backward op costs flops_factor x its forward op
  std::int64_t parameter_count = 0;  // elements of the trainable parameters (not their updated versions)
  // Byte totals are doubles: exact below 2^53 and never wrapping for absurd inputs.
  double parameter_bytes = 0;
  double gradient_bytes = 0;         // the final gradient of each parameter
  double optimizer_state_bytes = 0;  // master copies and moments (not their updated versions)
  double input_bytes = 0;
  double activation_bytes = 0;       // every tensor the forward pass produces
  double saved_activation_bytes = 0; // forward activations that backward ops read

  double total_flops() const { return flops[0] + flops[1] + flops[2]; }
  std::size_t total_ops() const { return ops[0] + ops[1] + ops[2]; }
};

// Forward FLOPs of every op (backward mirror ops: flops_factor x the mirrored op), indexed by OpId.
Expected<std::vector<double>> op_flops(const Graph& graph, const OpCatalog& catalog);

Expected<GraphStats> compute_stats(const Graph& graph, const OpCatalog& catalog);

// The batch of the graph's first input (its first dimension): the batch a preset was built at or a graph
// was traced at; 0 for a graph without inputs or with a scalar one.
std::int64_t batch_of(const Graph& graph);

}  // namespace loom::ir
