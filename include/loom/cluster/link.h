// Links between GPUs: the bandwidth tiers of a cluster (DESIGN.md, cost model).
#pragma once

#include <cstdint>
#include <string_view>

namespace loom::cluster {

enum class LinkKind : std::uint8_t { local, nvlink, nvswitch, pcie, infiniband, roce };

std::string_view name(LinkKind kind);  // "nvlink", "infiniband", ...
bool crosses_nodes(LinkKind kind);      // infiniband and roce

// One tier: per-GPU unidirectional bandwidth and per-message latency (the α of the α-β model).
struct LinkTier {
  LinkKind kind = LinkKind::local;
  double bandwidth = 0;  // bytes/s, one direction, per GPU
  double latency = 0;    // seconds
  bool operator==(const LinkTier&) const = default;
};

}  // namespace loom::cluster
