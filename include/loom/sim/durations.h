// Simulator durations from the cost models (DESIGN.md, "Cost model and simulator"):
//   compute      cost::ComputeModel: the roofline per sub-op, or its profile database's measurement; a
//                kernel launch overhead is ComputeConstants::launch_seconds;
//   collective   comm::AlphaBetaCostModel on the collective's exact group of devices, so a group inside a
//                node runs on NVLink / NVSwitch and one across nodes on InfiniBand / RoCE; ring or tree
//                (all-reduce), whichever comm finds faster. S is REFERENCE.md's: the per-device input
//                for all-reduce, reduce-scatter and all-to-all, the gathered output for all-gather.
//                A collective that is one group of a multi-group step (exec::CollectiveInfo::step: e.g.
//                tp 16 over two servers reduced as 8 concurrent pairs 0/8, 1/9, ...) is priced as the
//                whole step, every group at its S, as the layout search priced it: the step's groups
//                share each node's NICs (comm::CommCostOptions::share_nics), so a pair takes 8 pairs'
//                bytes over the server's NIC, not one pair's. Asynchronous starts likewise, by their tag;
//   p2p          the same model's point-to-point transfer over the link between the two devices
//                (launch latency, link latency, bytes / bandwidth);
//   local        a memory-bound copy: bytes read plus written over the GPU's HBM bandwidth at the
//                compute model's efficiency for the kind of kernel (ComputeConstants::bandwidth_efficiency:
//                a scale is elementwise, a slice or combine data movement), plus the launch overhead.
//   host_compute an offloaded optimizer step: its parameter elements over the GPU's share of its node's
//                CPU Adam throughput (cluster::Cluster::cpu_adam_share: every GPU's process updates at
//                once, after the backward), whichever the update rule;
//   copy         launch overhead + bytes over the GPU's share of its PCIe switch's uplink
//                (Cluster::pcie_share: the data-parallel ranks behind one switch copy at once).
// Times are cached: computes by (op, local shapes of inputs and outputs), which is all the ComputeModel
// reads of a sub-op, collectives by (kind, group, bytes, group step), p2p by (source, destination, bytes), so a
// plan of a million instructions prices each distinct instance once (data-parallel replicas and
// tensor-parallel peers share their computes). The hooks share the caches and are
// not thread-safe; the ExecPlan, the ComputeModel (and its plan) must outlive the Durations.
#pragma once

#include "loom/cluster/cluster.h"
#include "loom/comm/cost_model.h"
#include "loom/core/error.h"
#include "loom/cost/compute_model.h"
#include "loom/exec/exec_plan.h"
#include "loom/sim/simulator.h"

namespace loom::sim {

struct DurationOptions {
  comm::CommCostOptions comm;  // NCCL's launch latency per transfer, NIC sharing across a node
  double contention = 1;       // Durations::contention: communication's slowdown under compute (≥ 1)
  // Processes sharing the cluster's cores (cluster::SharedCores) that run at once, the slowdown's W; 0: the
  // plan's devices, all of them (sim/shared_cores.h finds fewer where they wait for each other).
  double busy_processes = 0;
};

// Errors: an ExecPlan without its plan, more devices than the cluster has, a contention below 1.
Expected<Durations> model_durations(const exec::ExecPlan& exec, const cost::ComputeModel& compute,
                                    const cluster::Cluster& cluster, DurationOptions options = {});

// The comm::Step a collective of the simulator runs: its kind over its one group, S as above from the
// largest member input `input_bytes` (and, for all-gather, the output buffer), and the bytes each member
// sends (2(n-1)/n S for all-reduce, (n-1)/n S otherwise).
comm::Step collective_step(const exec::ExecPlan& exec, const exec::Collective& collective, std::int64_t input_bytes);

// The group step (an index into exec.group_steps) a collective is priced with: its tag's
// CollectiveInfo::step where that step holds the collective's group, else -1 (priced alone).
std::int64_t priced_step(const exec::ExecPlan& exec, const exec::Collective& collective);

}  // namespace loom::sim
