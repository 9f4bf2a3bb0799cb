// Runs a Plan (sub-ops on devices, DESIGN.md "Primitives") with the reference kernels, each sub-op on
// its local slices, and compares the result with the single-device run_graph: the semantic check that
// coverage validation cannot make (a plan whose boxes cover every tensor may still compute the wrong
// data, e.g. a part reading the wrong half of a weight).
//
// Data moves without collectives: a sub-op's input is assembled directly from the pieces its producers
// wrote, element by element, from a set of value parts that tile the whole (the validator's rule).
#pragma once

#include <string>
#include <vector>

#include "loom/core/error.h"
#include "loom/ir/graph.h"
#include "loom/plan/plan.h"
#include "loom/verify/kernels.h"

namespace loom::verify {

// What one live sub-op wrote: its output SubTensor (box and value part) and the local values.
struct PlanPiece {
  plan::SubTensor tensor;
  NdArray value;
};

struct PlanRun {
  std::vector<NdArray> values;                 // by TensorId, like run_graph's result
  std::vector<std::vector<PlanPiece>> pieces;  // by TensorId: every piece written, in execution order
};

// Runs every live sub-op of a valid plan in plan::complete_order. `initial` holds the graph's leaves
// (as for run_graph). A leaf SubTensor is its box of `initial`, times its value fraction (part k of n
// holds whole / n); a produced one is assembled from the pieces written so far. Errors: an invalid plan,
// a kernel error (naming the sub-op), or a strided split of a position-dependent op, which the
// offset-based KernelContext cannot describe.
Expected<PlanRun> run_plan(const plan::Plan& plan, int num_devices, const std::vector<NdArray>& initial,
                           const KernelRegistry& kernels = reference_kernels());

// Worst disagreement over a class of tensors. rel = max |plan - ref| / max(max |ref|, floor) over one
// tensor: tensor-wise, since elementwise ratios blow up at the zeros of ReLU gradients, and with a floor
// because a mathematically zero tensor (e.g. a bias gradient after softmax) holds only rounding noise,
// which differs between any two summation orders.
struct ErrorStat {
  double max_abs = 0;
  double max_rel = 0;
  std::string worst;  // name of the tensor with the largest rel ("" when none)
};

struct RunComparison {
  ErrorStat activation;  // forward values other than the loss
  ErrorStat gradient;
  ErrorStat updated;     // parameters and optimizer states after the step
  ErrorStat loss;
  ErrorStat overall;     // the worst of the above
};

// Compares every tensor some op produces (leaves are inputs to both runs). Errors: a tensor with a
// value in one run but not the other, or of different shapes.
Expected<RunComparison> compare_runs(const ir::Graph& graph, const std::vector<NdArray>& reference,
                                     const std::vector<NdArray>& candidate, double floor = 1e-6);

}  // namespace loom::verify
