// Plan validation (DESIGN.md, "Validation"): every live sub-op on a device; every produced FullTensor
// produced exactly (at each element, value parts that tile the whole); data dependencies and order
// edges acyclic, a cycle being a deadlock reported by sub-op names. Orders left open are completed by
// a deterministic topological sort.
#pragma once

#include <vector>

#include "loom/plan/plan.h"

namespace loom::plan {

Expected<void> validate_plan(const Plan& plan, int num_devices);

// Producer -> consumer edges between live sub-ops whose SubTensors overlap, plus the order edges.
std::vector<std::vector<SubOpId>> dependency_edges(const Plan& plan);

// A global order of the live sub-ops consistent with every dependency, and each device's program in
// that order. Devices run side by side in unit-time rounds, each taking its first ready sub-op by the
// ops' program order and then sub-op id; a round's sub-ops go in that order too. A device's program
// depends only on the dependency structure, never on how other devices' sub-ops interleave, so devices
// related by a symmetry of the plan (data-parallel replicas, tensor-parallel peers, the devices of one
// pipeline stage) get programs equal up to renaming. Besides dependency_edges, the readers of a final
// gradient with resident pieces wait for all its producers, as materialization reduces it whole.
struct ExecutionOrder {
  std::vector<SubOpId> global;
  std::vector<std::vector<SubOpId>> per_device;
  std::vector<std::size_t> round_ends;  // per round, the index in `global` past its last sub-op
};
Expected<ExecutionOrder> complete_order(const Plan& plan, int num_devices);

}  // namespace loom::plan
