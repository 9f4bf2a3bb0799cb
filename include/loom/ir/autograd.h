// Autograd and optimizer: from a forward Graph and its loss, the training step's Graph.
//
// Backward: every differentiable forward op that lies on a path to the loss gets exactly one
// backward op that mirrors it (same type, pass=backward, mirror_of=the forward op, the forward op's
// annotation). Its inputs are the saved tensors (per the op's BackwardRule: forward inputs and/or
// outputs) followed by the gradients of the forward outputs that have one; its outputs are the
// gradients of the forward inputs that need one. attrs record the layout:
//   "grad_outputs": indices of forward outputs whose gradients are inputs, in order;
//   "grad_inputs":  indices of forward inputs whose gradients are outputs, in order;
//   "saved_inputs" / "saved_outputs": booleans.
// A tensor read by several ops gets one partial gradient per reader, summed by an "accumulate" op.
// The loss gradient is seeded by a "fill_like" op (value 1). Gradient tensors have role gradient
// and owner = the tensor they are the gradient of; a parameter's final gradient is named
// "<param>.grad".
//
// Optimizer: one op per parameter (pass=optimizer): "sgd", "adam" or "adamw". Inputs: parameter,
// gradient, then states (fp32 master copy when mixed precision and the parameter is 16-bit, then
// momentum / exp_avg, exp_avg_sq); outputs: the updated parameter, then the updated states.
// States have role optimizer_state and owner = the parameter; updated tensors set `updates`.
#pragma once

#include "loom/ir/graph.h"
#include "loom/ir/op_def.h"

namespace loom::ir {

enum class OptimizerKind : std::uint8_t { sgd, adam, adamw };
std::string_view name(OptimizerKind kind);
Expected<OptimizerKind> parse_optimizer(std::string_view text);

struct OptimizerOptions {
  OptimizerKind kind = OptimizerKind::adamw;
  // Keep an fp32 master copy of every 16-bit parameter (mixed-precision Adam: 16 bytes per parameter).
  bool master_weights = true;
  double lr = 1e-4;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;  // adamw only
  double momentum = 0.0;      // sgd only; > 0 adds a momentum state
};

// Appends the backward pass. Fails if the graph has no loss or the loss does not depend on any parameter.
Expected<Graph> add_backward(const Graph& forward, const OpCatalog& catalog);

// Appends one optimizer op per parameter that has a gradient.
Expected<Graph> add_optimizer(const Graph& with_backward, const OpCatalog& catalog, const OptimizerOptions& options);

// add_backward then add_optimizer.
Expected<Graph> build_training_graph(const Graph& forward, const OpCatalog& catalog, const OptimizerOptions& options);

// Which gradients a backward op computes (attr "grad_part", absent for whole): all of them, or, after
// split_weight_gradients, those of the non-parameter inputs (B) or of the parameters (W).
enum class GradPart : std::uint8_t { whole, input, weight };
std::string_view name(GradPart part);  // "whole", "input", "weight"
// The share of the whole backward's FLOPs a part computes: the split halves it, as the two products of
// a matrix multiply's backward (dX = dY W^T, dW = X^T dY) cost the same (Qi et al.'s T_B = T_W).
inline double flops_share(GradPart part) { return part == GradPart::whole ? 1.0 : 0.5; }

// For a backward op: the gradient of each forward output it reads, and the forward input each of
// its gradient outputs belongs to (decoded from the attrs above).
struct MirrorLayout {
  std::vector<int> grad_outputs;
  std::vector<int> grad_inputs;
  bool saved_inputs = false;
  bool saved_outputs = false;
  GradPart part = GradPart::whole;
};
Expected<MirrorLayout> mirror_layout(const Op& backward_op);
// The part of a backward op of a validated graph (whole for every op without "grad_part").
GradPart grad_part(const Op& backward_op);

// Zero-bubble pipelines (Qi et al. 2023): every backward op whose gradients include both parameter
// gradients and others becomes two backward ops mirroring the same forward op, in program order the
// input part B ("grad_part": "input", the non-parameter gradients, which the previous stage waits for)
// then the weight part W ("grad_part": "weight", the parameter gradients, which a schedule may defer).
// Both read the whole op's inputs (saved tensors and output gradients) and keep its gradient tensors,
// so the graph's other ops (accumulations, optimizer steps) are unchanged. Ops with one kind of
// gradient, and parts already split, stay as they are (the pass is idempotent). Runs on a graph with
// backward ops, before or after the optimizer pass; op ids after the first split shift.
Expected<Graph> split_weight_gradients(const Graph& graph);

}  // namespace loom::ir
