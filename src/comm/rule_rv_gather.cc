// RV-gather: each target receives k value parts of its chunk and sums them.
#include "inter_target.h"
#include "rule_checks.h"

namespace loom::comm {

Expected<Transition> rv_gather(const Layout& from, const TensorSpec& tensor, const std::vector<int>& targets,
                               std::int64_t k, const cluster::Cluster& cluster) {
  LOOM_RETURN_IF_ERROR(detail::require_factor("RV-gather", "V", from.v, k));
  Layout after = from;
  after.v /= k;
  return detail::land_on("RV-gather", from, std::move(after), tensor, targets, cluster);
}

}  // namespace loom::comm
