#include "loom/cluster/cluster.h"

#include <algorithm>
#include <cassert>
#include <set>

namespace loom::cluster {

LinkTier link_between(const Cluster& cluster, int a, int b) {
  assert(cluster.contains(a) && cluster.contains(b));
  if (a == b) return LinkTier{LinkKind::local, 0, 0};
  if (cluster.node_of(a) != cluster.node_of(b)) return cluster.inter;
  const int local_a = a % cluster.gpus_per_node;
  const int local_b = b % cluster.gpus_per_node;
  if (cluster.bridge && local_a / 2 == local_b / 2) return cluster.bridge->tier;
  return cluster.intra;
}

LinkTier group_link(const Cluster& cluster, std::span<const int> devices) {
  LinkTier slowest{LinkKind::local, 0, 0};
  bool any = false;
  for (std::size_t i = 0; i < devices.size(); ++i)
    for (std::size_t j = i + 1; j < devices.size(); ++j) {
      const LinkTier link = link_between(cluster, devices[i], devices[j]);
      if (link.kind == LinkKind::local) continue;
      if (!any || link.bandwidth < slowest.bandwidth) slowest = link;
      any = true;
    }
  return slowest;
}

int nodes_spanned(const Cluster& cluster, std::span<const int> devices) {
  std::set<int> nodes;
  for (int d : devices) nodes.insert(cluster.node_of(d));
  return static_cast<int>(nodes.size());
}

}  // namespace loom::cluster
