// Broadcast: every piece goes to k targets, which become k times as many replicas.
#include "inter_target.h"
#include "rule_checks.h"

namespace loom::comm {

Expected<Transition> broadcast_r(const Layout& from, const TensorSpec& tensor, const std::vector<int>& targets,
                                 std::int64_t k, const cluster::Cluster& cluster) {
  if (k < 2) return fail(fmt::format("broadcast: factor {} is below 2", k));
  Layout after = from;
  after.r *= k;
  return detail::land_on("broadcast", from, std::move(after), tensor, targets, cluster);
}

}  // namespace loom::comm
