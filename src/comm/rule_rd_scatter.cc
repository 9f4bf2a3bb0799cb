// RD-scatter: every device cuts its piece into k sub-chunks along a dimension and sends one to each of
// k targets (SuperScaler Figure 10 h; Figure 18 sends 1/8 of the tensor per link instead of all of it).
#include "inter_target.h"
#include "rule_checks.h"

namespace loom::comm {

Expected<Transition> rd_scatter(const Layout& from, const TensorSpec& tensor, const std::vector<int>& targets,
                                std::size_t dim, std::int64_t k, const cluster::Cluster& cluster) {
  LOOM_RETURN_IF_ERROR(detail::require_splittable("RD-scatter", from, tensor, dim, k));
  Layout after = from;
  after.d[dim] *= k;
  return detail::land_on("RD-scatter", from, std::move(after), tensor, targets, cluster);
}

}  // namespace loom::comm
