// Move: the whole layout moves to as many other devices, one piece per send.
#include "inter_target.h"

namespace loom::comm {

Expected<Transition> move_layout(const Layout& from, const TensorSpec& tensor, const std::vector<int>& targets,
                                 const cluster::Cluster& cluster) {
  return detail::land_on("move", from, from, tensor, targets, cluster);
}

}  // namespace loom::comm
