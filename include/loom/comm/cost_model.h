// Prices a communication step (DESIGN.md "Cost model"; REFERENCE.md "Formulas"), behind a narrow
// interface so tests can inject their own (STYLE.md item 7).
//
// α-β with ring algorithms. A group of n devices:
//   all-reduce      L + 2(n−1)·α + 2(n−1)/n·S / β    all-gather, reduce-scatter   L + (n−1)·α + (n−1)/n·S / β
//   all-to-all      L + (n−1)·α + (n−1)/n·S / β      (pairwise exchange)
// An all-reduce takes the faster of the ring and NCCL's tree, L + 2⌈log2 n⌉·α + 2·S / β, which wins for
// small buffers on many devices.
// L is a fixed cost per communication step (launch and synchronisation, NCCL's "base latency"), α the
// per-hop latency of the link. Without L a chain of small collectives (recursive halving/doubling)
// would look cheaper than one ring for every size, which NCCL's own tuning model does not predict.
// The ring visits members in device order, so it leaves each node it spans once. β is the slowest link
// the ring (or, for all-to-all, any member pair) uses, α the largest latency. Concurrent groups run in
// parallel: a step takes the longest group.
// p2p: L once, then every send costs α + bytes/β of its link; a device's sends are serialised, and so are its
// receives; a step takes the busiest device, plus, where it delivers value parts to be added, the sum
// as a memory-bound kernel (3 x the summed bytes over HBM bandwidth; collectives reduce in their kernel).
// NIC sharing (CommCostOptions::share_nics, on by default): a node-crossing flow may run at one NIC's
// full rate, a ring's node-crossing hop at as many NICs as it has channels (NCCL's parallel rings: the
// node's NICs, but no more than the group's members on each node it spans), but all flows leaving (or
// entering) a node in one step share the node's NICs, so a step
// also takes at least (bytes crossing a node's boundary) / (node NIC total). Off: every node-crossing
// link runs at the per-GPU share (node NIC total / GPUs per node) and nothing is shared.
// Not modelled: intra-node contention (NVSwitch is non-blocking), the compute of reductions inside
// collectives, trees for collectives other than all-reduce.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "loom/cluster/cluster.h"
#include "loom/comm/step.h"

namespace loom::comm {

class CommCostModel {
 public:
  virtual ~CommCostModel() = default;
  virtual double step_time(const Step& step) const = 0;  // seconds, ≥ 0
  // Identifies the model and its parameters, for caching search results.
  virtual std::string fingerprint() const = 0;
};

struct CommCostOptions {
  bool share_nics = true;        // see above
  double launch_latency = 8e-6;  // L, seconds per step that communicates (NCCL ring base latency ≈ 8 µs)
};

class AlphaBetaCostModel final : public CommCostModel {
 public:
  explicit AlphaBetaCostModel(cluster::Cluster cluster, CommCostOptions options = {});
  double step_time(const Step& step) const override;
  std::string fingerprint() const override;
  const cluster::Cluster& cluster() const { return cluster_; }

 private:
  cluster::Cluster cluster_;
  CommCostOptions options_;
};

// Bytes a step sends over each kind of link (ring links, all-to-all pairs, p2p transfers).
std::map<cluster::LinkKind, std::int64_t> bytes_per_tier(const Step& step, const cluster::Cluster& cluster);

}  // namespace loom::comm
