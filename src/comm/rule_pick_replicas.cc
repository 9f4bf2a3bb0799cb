// Replica pick: fewer targets than replicas; each target copies its piece from one of k replicas.
#include "inter_target.h"
#include "rule_checks.h"

namespace loom::comm {

Expected<Transition> pick_replicas(const Layout& from, const TensorSpec& tensor, const std::vector<int>& targets,
                                   std::int64_t k, const cluster::Cluster& cluster) {
  LOOM_RETURN_IF_ERROR(detail::require_factor("replica pick", "R", from.r, k));
  Layout after = from;
  after.r /= k;
  return detail::land_on("replica pick", from, std::move(after), tensor, targets, cluster);
}

}  // namespace loom::comm
