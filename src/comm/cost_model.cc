#include "loom/comm/cost_model.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <span>
#include <vector>

#include <fmt/format.h>

namespace loom::comm {
namespace {

using cluster::Cluster;
using cluster::LinkTier;

// The largest of the per-key sums of `amounts` ((key, amount) pairs), each key's amounts added in their
// order in the list, as a map's `+=` would add them (the same doubles), without a map node per key: a p2p
// step over 64 devices has ~4,000 transfers and the layout search prices one at every state it expands.
double largest_sum(std::vector<std::pair<int, double>>& amounts) {
  std::ranges::stable_sort(amounts, {}, &std::pair<int, double>::first);
  double largest = 0;
  for (std::size_t i = 0; i < amounts.size();) {
    double sum = 0;
    const int key = amounts[i].first;
    for (; i < amounts.size() && amounts[i].first == key; ++i) sum += amounts[i].second;
    largest = std::max(largest, sum);
  }
  return largest;
}

// Per-node bytes crossing the node boundary in one step, out and in: only the nodes the step touches, so
// pricing a step costs the same on a 65,536-node cluster as on one node.
struct NicLoad {
  std::vector<std::pair<int, double>> out, in;  // (node, bytes), summed per node by `time`
  void add(const Cluster& c, int src, int dst, double bytes) {
    out.emplace_back(c.node_of(src), bytes);
    in.emplace_back(c.node_of(dst), bytes);
  }
  double time(const Cluster& c) {
    const double nic = c.node_nic_bandwidth();
    if (nic <= 0) return 0;
    return std::max(largest_sum(out), largest_sum(in)) / nic;
  }
};

std::vector<int> ring_order(std::vector<int> group) {
  std::ranges::sort(group);  // devices are node-major, so the ring leaves each node once
  return group;
}

// NCCL runs a ring as parallel channels, each leaving the node through its own NIC, so a ring's
// node-crossing hop moves at as many NICs as the node has and the group has members on it to drive them
// (a member per node: one NIC; 16 members on a DGX-2: its 8). What all groups of a step send across a
// node together stays bounded by the node's NICs (NicLoad).
int ring_channels(const Cluster& c, std::span<const int> ring) {
  std::map<int, int> members_per_node;
  for (int d : ring) ++members_per_node[c.node_of(d)];
  int channels = std::max(1, c.nics_per_node);
  for (const auto& [node, members] : members_per_node) channels = std::min(channels, members);
  return channels;
}

double ring_steps(Primitive p, std::size_t n) {
  return p == Primitive::all_reduce ? 2.0 * static_cast<double>(n - 1) : static_cast<double>(n - 1);
}

}  // namespace

AlphaBetaCostModel::AlphaBetaCostModel(cluster::Cluster cluster, CommCostOptions options)
    : cluster_(std::move(cluster)), options_(options) {}

std::string AlphaBetaCostModel::fingerprint() const {
  const Cluster& c = cluster_;
  std::string f = fmt::format("alpha-beta share_nics={} launch={} {} {}x{} intra={}/{} inter={}/{} nic={}x{}", options_.share_nics,
                              options_.launch_latency, c.name, c.nodes, c.gpus_per_node, c.intra.bandwidth, c.intra.latency, c.inter.bandwidth,
                              c.inter.latency, c.nics_per_node, c.nic_bandwidth);
  if (c.bridge) f += fmt::format(" bridge={}/{}", c.bridge->tier.bandwidth, c.bridge->tier.latency);
  return f;
}

double AlphaBetaCostModel::step_time(const Step& step) const {
  const Cluster& c = cluster_;
  // A link's bandwidth for one flow: a node-crossing flow gets one NIC when NICs are shared per step.
  const auto flow = [&](int a, int b) {
    LinkTier link = cluster::link_between(c, a, b);
    if (options_.share_nics && c.node_of(a) != c.node_of(b)) link.bandwidth = c.nic_bandwidth;
    return link;
  };
  NicLoad nics;
  double worst = 0;
  if (step.primitive == Primitive::p2p) {
    std::vector<std::pair<int, double>> send, recv;  // (device, seconds), summed per device
    send.reserve(step.transfers.size());
    recv.reserve(step.transfers.size());
    for (const Transfer& t : step.transfers) {
      if (t.src == t.dst || t.bytes == 0) continue;
      const LinkTier link = flow(t.src, t.dst);
      const double seconds = link.latency + static_cast<double>(t.bytes) / link.bandwidth;
      send.emplace_back(t.src, seconds);
      recv.emplace_back(t.dst, seconds);
      if (c.node_of(t.src) != c.node_of(t.dst)) nics.add(c, t.src, t.dst, static_cast<double>(t.bytes));
    }
    worst = std::max(largest_sum(send), largest_sum(recv));
    // Summing received value parts: a memory-bound kernel reading both operands and writing the sum.
    if (step.summed_bytes > 0 && c.gpu.memory_bandwidth > 0)
      worst += 3.0 * static_cast<double>(step.summed_bytes) / c.gpu.memory_bandwidth;
  } else if (is_collective(step.primitive)) {
    for (const std::vector<int>& members : step.groups) {
      const std::size_t n = members.size();
      if (n < 2) continue;
      const std::vector<int> ring = ring_order(members);
      double bandwidth = 0, latency = 0;
      bool first = true;
      const auto use = [&](const LinkTier& link) {
        bandwidth = first ? link.bandwidth : std::min(bandwidth, link.bandwidth);
        latency = std::max(latency, link.latency);
        first = false;
      };
      const auto moved = static_cast<double>(step.bytes_per_device);
      if (step.primitive == Primitive::all_to_all) {
        const double piece = static_cast<double>(step.buffer_bytes) / static_cast<double>(n);
        for (int a : ring)
          for (int b : ring) {
            if (a == b) continue;
            use(flow(a, b));
            if (c.node_of(a) != c.node_of(b)) nics.add(c, a, b, piece);
          }
      } else {
        const int channels = ring_channels(c, ring);
        for (std::size_t i = 0; i < n; ++i) {
          const int a = ring[i], b = ring[(i + 1) % n];
          LinkTier link = flow(a, b);
          if (options_.share_nics && c.node_of(a) != c.node_of(b)) link.bandwidth = c.nic_bandwidth * channels;
          use(link);
          if (c.node_of(a) != c.node_of(b)) nics.add(c, a, b, moved);
        }
      }
      double seconds = ring_steps(step.primitive, n) * latency + moved / bandwidth;
      // NCCL's double binary tree: 2·⌈log2 n⌉ hops of latency, each member sending its buffer about
      // twice; it wins for small buffers on many devices, where the ring's 2(n−1) hops dominate.
      if (step.primitive == Primitive::all_reduce)
        seconds = std::min(seconds, 2.0 * std::ceil(std::log2(static_cast<double>(n))) * latency +
                                        2.0 * static_cast<double>(step.buffer_bytes) / bandwidth);
      worst = std::max(worst, seconds);
    }
  }
  if (options_.share_nics) worst = std::max(worst, nics.time(c));
  return worst > 0 ? options_.launch_latency + worst : 0;  // a step that moves nothing launches nothing
}

std::map<cluster::LinkKind, std::int64_t> bytes_per_tier(const Step& step, const cluster::Cluster& c) {
  std::map<cluster::LinkKind, std::int64_t> bytes;
  const auto add = [&](int a, int b, std::int64_t n) {
    if (a != b && n > 0) bytes[cluster::link_between(c, a, b).kind] += n;
  };
  if (step.primitive == Primitive::p2p) {
    for (const Transfer& t : step.transfers) add(t.src, t.dst, t.bytes);
  } else if (is_collective(step.primitive)) {
    for (const std::vector<int>& members : step.groups) {
      const std::vector<int> ring = ring_order(members);
      const std::size_t n = ring.size();
      if (n < 2) continue;
      if (step.primitive == Primitive::all_to_all) {
        const std::int64_t piece = step.buffer_bytes / static_cast<std::int64_t>(n);
        for (int a : ring)
          for (int b : ring) add(a, b, piece);
      } else {
        for (std::size_t i = 0; i < n; ++i) add(ring[i], ring[(i + 1) % n], step.bytes_per_device);
      }
    }
  }
  return bytes;
}

}  // namespace loom::comm
