// RD-gather: each target receives k neighbouring chunks along a dimension and concatenates them.
#include "inter_target.h"
#include "rule_checks.h"

namespace loom::comm {

Expected<Transition> rd_gather(const Layout& from, const TensorSpec& tensor, const std::vector<int>& targets,
                               std::size_t dim, std::int64_t k, const cluster::Cluster& cluster) {
  LOOM_RETURN_IF_ERROR(detail::require_dim("RD-gather", from, dim));
  LOOM_RETURN_IF_ERROR(detail::require_factor("RD-gather", fmt::format("D[{}]", dim), from.d[dim], k));
  Layout after = from;
  after.d[dim] /= k;
  return detail::land_on("RD-gather", from, std::move(after), tensor, targets, cluster);
}

}  // namespace loom::comm
