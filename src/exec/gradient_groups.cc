#include "gradient_groups.h"

#include <algorithm>
#include <vector>

namespace loom::exec::detail {

GradientGroups gradient_groups(std::span<const ProducedPart> produced, const std::set<int>& holders) {
  if (produced.empty()) return {};
  const std::int64_t parts = produced.front().value.count;
  if (std::ranges::any_of(produced, [&](const ProducedPart& p) { return p.value.count != parts; })) return {};
  for (std::int64_t count = parts / 2; count > 1; --count) {  // finest first
    if (parts % count != 0) continue;
    const GradientGroups groups{count, parts};
    std::vector<std::set<int>> writers(static_cast<std::size_t>(count));
    for (const ProducedPart& p : produced) writers[static_cast<std::size_t>(groups.of(p.value))].insert(p.device);
    if (std::ranges::all_of(writers, [&](const std::set<int>& w) { return std::ranges::includes(w, holders); }))
      return groups;
  }
  return {};
}

}  // namespace loom::exec::detail
