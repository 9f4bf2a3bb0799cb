// Materialization (DESIGN.md, "Materialization"): turns a validated Plan into an ExecPlan by placing
// every sub-op's compute on its device and inserting the data movement its inputs need.
//
// Sub-ops are emitted in the plan's completed global order (plan::complete_order); before a compute,
// each input it reads gets a buffer on its device:
//  - data is loaded there; a parameter or optimizer state is read as a slice of one of the device's
//    resident pieces (plan/residence.h), all loaded when the program starts, or, where none holds the
//    read, gathered for the reading op from the other devices' pieces (ZeRO-3);
//  - a piece already there (its producer's output, or an earlier transfer) is reused;
//  - otherwise the tensor's consumers of one op are grouped with the producer pieces they overlap. When
//    both sides are uniform over distinct devices (RVD layouts over the group's bounding box), the
//    layout search (comm/search.h) picks the collectives and p2p steps, emitted at once for the whole
//    group, so e.g. data-parallel weight gradients become one all-reduce;
//  - anything else takes the general fallback: slice what overlaps on each producer, send it, and
//    combine (concatenate and sum) on the consumer.
// A device's value parts of one box (micro-batches' partial gradients) are summed there before they move,
// so one reduction per step follows. When the last producer of a tensor has run, a gradient with resident
// pieces is reduced into them (ZeRO-2), and the updated version of a persistent tensor is moved into the
// tensor's resident pieces (step closing: each device ends the step with what the next step loads).
// Because every device's program is a subsequence of one global sequence, collectives appear in the
// same relative order on all members, and every send precedes its receive: the result cannot hang
// (exec/check.h verifies it). Buffers are freed after their last use, except the outputs nobody reads
// (the updated parameters and optimizer states the step closes with, the loss).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "loom/cluster/cluster.h"
#include "loom/comm/search.h"
#include "loom/exec/exec_plan.h"

namespace loom::exec {

struct MaterializeOptions {
  // Prices the layout search. Without one, a DGX-A100 cluster with enough nodes for the plan's devices.
  std::optional<cluster::Cluster> cluster;
  // Prices the search; without one, α-β over the cluster (comm/cost_model.h).
  std::shared_ptr<const comm::CommCostModel> cost_model;
  // A plan moves many tensors, most over small groups; a budget a twentieth of comm's default keeps a
  // wide group (64 devices) to a few tens of ms, while 8-device groups rarely reach it (and out of
  // budget the search keeps the best path found, the start's direct collectives included).
  comm::SearchOptions search{.max_states = 1'000};
  // Layout searches answered from the process's earlier materializations (comm::SharedTransitionCache):
  // the same plans, searched once per process. false: this materialization searches everything itself.
  bool share_transitions = true;
  bool use_layout_search = true;  // false: the general fallback for everything (tests compare both)
  bool free_buffers = true;
  // Recomputation sums again what the forward summed from recomputed sub-ops' partial sums (the all-reduce
  // after a row-parallel linear), as Megatron-LM's full recompute does, and the backward of a recomputed
  // forward reads those sums; false: those sums are checkpoints and recomputation issues no collective
  // (Oases' fine-grained recompute, plan/recompute.h). Sums of one device's own partial sums (a coshard
  // region's parts at tp 1) are summed again either way: no transfer to repeat.
  bool recompute_collectives = false;
};

// What materialization did, for reports, tests and benchmarks.
struct MaterializeStats {
  std::int64_t transitions_searched = 0;   // groups moved by the layout search
  std::int64_t distinct_searches = 0;      // of those, searches not answered by the cache
  std::int64_t fallback_fetches = 0;       // consumer pieces assembled by the fallback
  std::int64_t loads = 0;
  std::map<std::string, std::int64_t> collectives;  // by primitive name, one per group instance
  std::int64_t sends = 0;
  std::int64_t bytes_sent = 0;  // by collectives (per member, cost-model convention) and sends
  int autograd_pairs = 0;       // forward/backward collective pairs (autograd_pairs.h)
  std::int64_t recomputed = 0;  // sub-ops run again for the backward pass (plan/recompute.h)
};

struct Materialized {
  ExecPlan exec;
  MaterializeStats stats;
};

// α-β over `cluster` with every latency zero: sizes alone decide. Verification runs shrunk models whose
// tensors are so small that latency would make every transition plain p2p; under this model they take
// the collectives the full-size model would.
std::shared_ptr<const comm::CommCostModel> bandwidth_only_cost(cluster::Cluster cluster);

// Errors: an invalid plan (validate_plan's message), a plan with more devices than the cluster has.
Expected<Materialized> materialize(const plan::Plan& plan, int num_devices, const MaterializeOptions& options = {});

}  // namespace loom::exec
