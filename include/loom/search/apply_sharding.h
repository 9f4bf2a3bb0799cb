// A sharding of a stage's ops on a device mesh, applied with the primitives alone (DESIGN.md "Primitives"):
// each forward op is transformed by its strategy, its parts assigned to the mesh's devices, and every op
// outside the forward pass that no forward op carries along (optimizer steps, gradient accumulations, the
// loss-gradient seed) is split as the tensor it belongs to lies. The strategy graph (strategy_graph.h)
// prices these same transformations, so what it predicts is what the job pipeline then materializes.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "loom/core/error.h"
#include "loom/ir/graph.h"
#include "loom/ir/op_def.h"
#include "loom/plan/plan.h"

namespace loom::search {

// Devices as a grid: {n} (1-D) or {a, b} (2-D). The device of coordinate (i, j) is i * b + j, so a 2-D
// mesh's second axis is the inner one (on one node's NVLink when b divides the node).
struct DeviceMesh {
  std::vector<int> axes;

  int size() const;  // the product of the axes
  bool operator==(const DeviceMesh&) const = default;
};

// Errors: no axes or more than two, an axis below 1.
Expected<void> check_mesh(const DeviceMesh& mesh);
std::string to_string(const DeviceMesh& mesh);  // "4", "2x4"

// How one op lies on the mesh: per axis, the annotation identifier split across that axis's devices
// ('*' dimensions as "*0", "*1", ...; a '+' identifier makes partial sums), or nullopt to replicate along
// it. The same identifier on both axes splits it a x b ways.
struct OpStrategy {
  std::vector<std::optional<std::string>> axes;

  bool operator==(const OpStrategy&) const = default;
  auto operator<=>(const OpStrategy&) const = default;
};
// "split o", "replicate", "(split *0, replicate)" on two axes.
std::string to_string(const OpStrategy& strategy);
// Every axis replicated.
OpStrategy replicated(const DeviceMesh& mesh);

// Transforms `sub_op` (a whole, live forward sub-op) over the mesh, axis 0 first and then each part along
// axis 1, and assigns part k to device k; returns the parts by device. Replication is Megatron's
// (ReplicateAlgo::redundant_backward): every replica computes the whole gradients, so replicated ops need
// their output gradient whole and never sum their weights' gradients. Errors: trans's (an identifier the
// op does not have, a frozen one, sizes the axis does not divide), naming the op.
Expected<std::vector<plan::SubOpId>> shard_op(plan::Plan& plan, plan::SubOpId sub_op, const OpStrategy& strategy,
                                              const DeviceMesh& mesh);

// Per mesh axis, the dimension of a tensor split across that axis (nullopt: whole, or partial sums).
using TensorSplit = std::vector<std::optional<int>>;

// The split of input `tensor` (output when `output`) of `sub_op`'s op under `strategy`: on each axis the
// dimension the strategy's identifier names in that tensor (first atom of a merged dimension), if any.
TensorSplit tensor_split(const plan::Plan& plan, plan::SubOpId sub_op, bool output, std::size_t tensor,
                         const OpStrategy& strategy);

// Transforms an op outside the forward pass (optimizer step, gradient accumulation, loss-gradient seed:
// live, whole) as its owner tensor lies (`owner`): on each axis split along the identifier at the owner's
// split dimension of its first output, replicated (plainly) where the owner is whole; part k on device k.
Expected<std::vector<plan::SubOpId>> shard_follower(plan::Plan& plan, plan::SubOpId sub_op, const TensorSplit& owner,
                                                    const DeviceMesh& mesh);

// The tensor an op outside the forward pass belongs to: an optimizer step's parameter, else the tensor
// whose gradient its first output is (invalid for none).
ir::TensorId follower_owner(const ir::Graph& graph, const ir::Op& op);

// By TensorId, the first forward op reading each parameter (other than for its shape): the op whose
// strategy places the parameter, its gradient and its optimizer states. Invalid for the other tensors.
std::vector<ir::OpId> first_parameter_readers(const plan::Plan& plan);

// A fresh plan of `graph` with every forward op sharded by `strategies` (by OpId; entries of the other
// ops are ignored) on `mesh`, and the other ops that no forward op carries following their owner tensor:
// a parameter as its first reader splits it, an activation as its producer writes it. Errors: a mesh
// check_mesh refuses, a strategy count other than the op count, a strategy an op refuses (naming it).
Expected<plan::Plan> apply_sharding(const ir::Graph& graph, const ir::OpCatalog& catalog, const DeviceMesh& mesh,
                                    std::span<const OpStrategy> strategies);

}  // namespace loom::search
