// A cluster: nodes × GPUs per node, one GPU model, and the links between GPUs.
// Devices are numbered 0 .. nodes·gpus_per_node − 1, node-major: device d lives on node d / gpus_per_node.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "loom/cluster/gpu.h"
#include "loom/cluster/link.h"

namespace loom::cluster {

// A faster link between fixed pairs of local GPUs (the NVLink bridge of an RTX 3090 pair: local GPUs
// 2k and 2k+1); the other local pairs use the cluster's intra-node tier.
struct PairBridge {
  LinkTier tier;
  bool operator==(const PairBridge&) const = default;
};

struct Cluster {
  std::string name;
  int nodes = 1;
  int gpus_per_node = 1;
  GpuSpec gpu;
  LinkTier intra;                     // between GPUs of one node
  std::optional<PairBridge> bridge;   // overrides `intra` between local GPUs 2k and 2k+1
  LinkTier inter;                     // between nodes; bandwidth = node NIC total / gpus_per_node
  int nics_per_node = 1;
  double nic_bandwidth = 0;           // bytes/s of one NIC, one direction
  // Communication's slowdown while its GPU computes (sim::Durations::contention, f >= 1: a collective
  // beside compute progresses at 1/f of its speed, NCCL's kernels sharing the SMs and memory bandwidth).
  // A measured property of the GPU, NCCL and the kernels beside it; the presets keep 1 (no slowdown: no
  // source paper gives a number), and a cluster file may set its own (docs/clusters.md).
  double comm_contention = 1;

  int device_count() const { return nodes * gpus_per_node; }
  int node_of(int device) const { return device / gpus_per_node; }
  bool contains(int device) const { return device >= 0 && device < device_count(); }
  double node_nic_bandwidth() const { return nic_bandwidth * nics_per_node; }
  bool operator==(const Cluster&) const = default;
};

// The link between two devices of the cluster (both must be in range): `local` for a == b.
LinkTier link_between(const Cluster& cluster, int a, int b);

// The slowest link any two members of `devices` share: the intra-node tier (or bridge) if they lie in
// one node, else the inter-node tier. A single device gives `local`.
LinkTier group_link(const Cluster& cluster, std::span<const int> devices);

// Number of distinct nodes `devices` span.
int nodes_spanned(const Cluster& cluster, std::span<const int> devices);

}  // namespace loom::cluster
