// The three primitives (nnScaler §3): trans splits a sub-op into parts, assign places a sub-op on a
// device, order adds a happens-before edge. Policies are written with these alone.
//
// trans follows the annotation. Splitting identifier x into n parts: every tensor whose dimension is
// x (or starts a merged dimension with x) gets the k-th of n ranges of that dimension; if x is a
// reduction ('x+'), outputs become value parts k of n, and so do additive inputs lacking x (biases);
// other inputs lacking x are replicated. Replicating makes n copies with the same SubTensors.
// Transforming a forward sub-op transforms its backward part the same way, and gradients follow:
// the gradient of an output keeps that output's box (a value part when the forward was replicated,
// unless the replication is redundant_backward); the gradient of an input has the input's box, and is a
// value part k of n when the part saw the input only partially (an input lacking a plain x, a
// multiplying input lacking a reduced x, or any input of a replica that is not redundant_backward).
#pragma once

#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "loom/plan/plan.h"

namespace loom::plan {

struct SplitAlgo {
  std::string identifier;  // as in the op's annotation; '*' dims are "*0", "*1", ...
  bool strided = false;    // part k takes every n-th index from k (Rhino's strided sharding)
};
// Replication. By default each replica's backward reads its share of the output gradient (value part k
// of n) and writes value parts of the input gradients: cheap when the consumers' gradients are partial
// anyway and are summed later (data-parallel replicas of an op without a batch). With
// `redundant_backward` every replica's backward reads the whole output gradient and computes the whole
// input and weight gradients, identical on every replica (Megatron's tensor-parallel layer norms and
// residual adds: one all-reduce of the output gradient, no all-reduce of the weights' gradients).
struct ReplicateAlgo {
  bool redundant_backward = false;
};
// Value split of an op that is linear in all its inputs jointly (OpDef::linear: gradient
// accumulations): part k reads value part k of n of every input and writes value part k of n of every
// output. Partial sums already on each device are then summed in place and reduced once, instead of
// each being all-reduced before the sum. Ops with a backward part are refused (each part's gradient
// would be the whole output gradient).
struct ValueSplitAlgo {};
using TransAlgo = std::variant<SplitAlgo, ReplicateAlgo, ValueSplitAlgo>;

// Replaces `sub_op` (a live forward, optimizer or non-mirror backward sub-op) by n parts and returns
// them; the parts keep its device. Errors: dead or backward-mirror sub-op, unknown or frozen
// identifier, an identifier inside a merged dimension other than first, sizes not divisible by n.
Expected<std::vector<SubOpId>> trans(Plan& plan, SubOpId sub_op, const TransAlgo& algo, int n);

// Places the sub-op (and its backward part) on a device.
Expected<void> assign(Plan& plan, SubOpId sub_op, int device);

// `first` happens before `second` (both live).
Expected<void> order(Plan& plan, SubOpId first, SubOpId second);

// The identifier naming dimension `dim` of input (or output) `tensor` of a sub-op's op, e.g. the batch
// dimension of a linear's input is "*0"; nullopt for fixed-size or opaque dims.
std::optional<std::string> dim_identifier(const Plan& plan, SubOpId sub_op, bool output, std::size_t tensor,
                                          std::size_t dim);

}  // namespace loom::plan
