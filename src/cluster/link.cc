#include "loom/cluster/link.h"

namespace loom::cluster {

std::string_view name(LinkKind kind) {
  switch (kind) {
    case LinkKind::local: return "local";
    case LinkKind::nvlink: return "nvlink";
    case LinkKind::nvswitch: return "nvswitch";
    case LinkKind::pcie: return "pcie";
    case LinkKind::infiniband: return "infiniband";
    case LinkKind::roce: return "roce";
  }
  return "?";
}

bool crosses_nodes(LinkKind kind) { return kind == LinkKind::infiniband || kind == LinkKind::roce; }

}  // namespace loom::cluster
