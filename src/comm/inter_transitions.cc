// Enumerates the inter-group rules whose device counts fit the target list.
#include "loom/comm/inter_rules.h"

namespace loom::comm {
namespace {

void keep(std::vector<Transition>& out, Expected<Transition> t) {
  if (t) out.push_back(std::move(*t));
}

}  // namespace

std::vector<Transition> inter_transitions(const Layout& from, const TensorSpec& tensor, const std::vector<int>& targets,
                                          const cluster::Cluster& cluster) {
  std::vector<Transition> out;
  const auto n_from = static_cast<std::int64_t>(from.devices.size());
  const auto n_to = static_cast<std::int64_t>(targets.size());
  const std::size_t rank = from.d.size();
  if (n_to == n_from) keep(out, move_layout(from, tensor, targets, cluster));
  if (n_to > n_from && n_to % n_from == 0) {
    const std::int64_t k = n_to / n_from;
    keep(out, broadcast_r(from, tensor, targets, k, cluster));
    for (std::size_t dim = 0; dim < rank; ++dim) keep(out, rd_scatter(from, tensor, targets, dim, k, cluster));
  }
  if (n_from > n_to && n_from % n_to == 0) {
    const std::int64_t k = n_from / n_to;
    keep(out, pick_replicas(from, tensor, targets, k, cluster));
    keep(out, rv_gather(from, tensor, targets, k, cluster));
    for (std::size_t dim = 0; dim < rank; ++dim) keep(out, rd_gather(from, tensor, targets, dim, k, cluster));
  }
  return out;
}

}  // namespace loom::comm
