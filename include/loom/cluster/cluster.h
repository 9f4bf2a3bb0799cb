// A cluster: nodes × GPUs per node, one GPU model, and the links between GPUs.
// Devices are numbered 0 .. nodes·gpus_per_node − 1, node-major: device d lives on node d / gpus_per_node.
#pragma once

#include <algorithm>
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

// What each node's host offers an offloaded optimizer (ZeRO-Offload, Ren et al. ATC '21): every GPU's
// link to host memory, the CPUs' Adam throughput and the host memory. A cluster file may omit them
// (docs/clusters.md): these defaults are then the DGX-2's, the ZeRO-Offload paper's testbed.
struct HostSpec {
  // bytes/s, one direction, of one GPU's PCIe link to host memory (effective, pinned memory): PCIe 3.0
  // x16 moves ~12 GB/s.
  double pcie_bandwidth = 12e9;
  // GPUs behind one PCIe switch, sharing its uplink to the CPU (2 on DGX-1, DGX-2 and DGX A100): when all
  // copy at once, as data-parallel ranks do, each gets pcie_bandwidth / this.
  int gpus_per_pcie_switch = 2;
  // Parameters per second the node's CPUs update with Adam (DeepSpeed's vectorized CPU-Adam), shared by
  // the node's GPUs' processes: ZeRO-Offload's Table 3, 1 billion parameters in 0.22 s on a DGX-2's two
  // 24-core Xeon Platinum 8168 (AVX512).
  double cpu_adam_params_per_second = 1e9 / 0.22;
  std::int64_t memory_bytes = std::int64_t{1536} << 30;  // one node's host memory (DGX-2: 1.5 TiB)
  bool operator==(const HostSpec&) const = default;
};

// Devices that are processes of one host sharing its cores (the CPU cluster `loom calibrate` fits on gloo
// runs, docs/calibration.md), and what each of their instructions costs beyond the cost models' price: the
// runtime's dispatch. With W of a plan's processes on `cores` cores, every compute and local instruction
// takes  slowdown · (time_scale · modelled + instruction_overhead),  slowdown = 1 + core_sharing ·
// max(0, W − cores) / cores, and every collective and transfer adds slowdown · instruction_overhead and
// takes 1 + comm_sharing · max(0, W − cores) / cores times its price: over loopback a collective's copies and
// sums, and each hop's wake-up, run on the shared cores too. A point-to-point transfer (a pipeline's send) may have its own α-β, p2p_latency + bytes / p2p_bandwidth,
// in place of the link's: gloo over loopback moves one tensor to one peer by another path than its ring
// collectives (one socket write, no algorithm). So may an all-gather and a reduce-scatter, priced as the
// link's ring with their own α and β ((n−1)·α + (n−1)/n·S/β, S the whole): gloo runs each by its own
// algorithm, whose rates over loopback differ from its all-reduce's several times (`python -m
// loom_profile.cluster` measures each kind). The defaults change nothing (a GPU per device).
struct SharedCores {
  int cores = 0;                    // 0: the devices share nothing (a GPU each)
  double core_sharing = 1;          // 1: W processes on C cores compute W / C times slower; 0: no slowdown
  double time_scale = 1;            // multiplies every modelled compute (profile database or roofline)
  double instruction_overhead = 0;  // seconds per instruction (dispatch, the autograd engine)
  double comm_sharing = 0;          // γ of communication: 0, communication runs beside the sharing unslowed
  double p2p_latency = 0;           // seconds per transfer, with p2p_bandwidth set
  double p2p_bandwidth = 0;         // bytes/s of a transfer; 0: the link's α-β prices transfers
  double all_gather_latency = 0;    // seconds per ring hop of an all-gather, with all_gather_bandwidth set
  double all_gather_bandwidth = 0;  // bytes/s of an all-gather's ring; 0: the link's α-β
  double reduce_scatter_latency = 0;    // likewise for a reduce-scatter
  double reduce_scatter_bandwidth = 0;
  // Seconds every collective adds to its link's price, slowed like it: the runtime's work around the call
  // (ordering the members, copying the input, assembling the pieces) and gloo's threads waking from a
  // compute, which back-to-back calls of the link's measurement do not pay.
  double collective_overhead = 0;

  // The slowdown of `processes` processes sharing the cores (a mean over time may be fractional:
  // sim/shared_cores.h).
  double slowdown(double processes) const { return slowdown(processes, core_sharing); }
  double comm_slowdown(double processes) const { return slowdown(processes, comm_sharing); }
  double slowdown(double processes, double sharing) const {
    return cores > 0 && processes > cores ? 1 + sharing * (processes - cores) / cores : 1;
  }
  bool operator==(const SharedCores&) const = default;
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
  HostSpec host;                      // each node's host, for offloaded optimizers
  SharedCores shared;                 // processes sharing a host's cores (a CPU cluster); default: none

  // One GPU's PCIe bandwidth when every GPU of its switch copies at once.
  double pcie_share() const { return host.pcie_bandwidth / std::min(host.gpus_per_pcie_switch, gpus_per_node); }
  // One GPU's share of its node's CPU Adam throughput, every GPU's process updating at once.
  double cpu_adam_share() const { return host.cpu_adam_params_per_second / gpus_per_node; }

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
