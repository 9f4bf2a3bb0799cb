// Builds the layout an inter-group rule lands on and the p2p step that fills it (private to src/comm).
#pragma once

#include <string_view>
#include <vector>

#include "loom/comm/inter_rules.h"
#include "loom/comm/p2p_fetch.h"

namespace loom::comm::detail {

// `after` takes `from`'s factors with the given changes and lies on `targets` in grid order.
inline Expected<Transition> land_on(std::string_view rule, const Layout& from, Layout after, const TensorSpec& tensor,
                                    const std::vector<int>& targets, const cluster::Cluster& cluster) {
  after.devices = targets;
  if (after.size() != static_cast<std::int64_t>(targets.size()))
    return fail(fmt::format("{}: {} needs {} target devices, {} given", rule, to_string(after), after.size(), targets.size()));
  LOOM_RETURN_IF_ERROR(validate(after, tensor, cluster));
  Step step = p2p_fetch(from, after, tensor, cluster, std::string(rule));
  return Transition{std::move(after), std::move(step)};
}

}  // namespace loom::comm::detail
