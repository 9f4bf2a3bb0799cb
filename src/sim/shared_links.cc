#include "shared_links.h"

#include <algorithm>
#include <cmath>

namespace loom::sim::detail {

bool LinkSpans::shared_at_once() const {
  for (const auto& streams : by_slot)
    for (std::size_t x = 0; x < kLinkStreams; ++x)
      for (std::size_t y = x + 1; y < kLinkStreams; ++y) {
        const auto& a = streams[x];
        const auto& b = streams[y];
        // Both sorted and disjoint: a merge finds every overlapping pair.
        for (std::size_t i = 0, j = 0; i < a.size() && j < b.size();) {
          if (std::min(a[i].end, b[j].end) > std::max(a[i].start, b[j].start) && (a[i].links & b[j].links) != 0)
            return true;
          if (a[i].end < b[j].end) ++i; else ++j;
        }
      }
  return false;
}

bool LinkSpans::same_as(const LinkSpans& other, double tolerance) const {
  if (by_slot.size() != other.by_slot.size()) return false;
  for (std::size_t s = 0; s < by_slot.size(); ++s)
    for (std::size_t k = 0; k < kLinkStreams; ++k) {
      const auto& mine = by_slot[s][k];
      const auto& theirs = other.by_slot[s][k];
      if (mine.size() != theirs.size()) return false;
      for (std::size_t i = 0; i < mine.size(); ++i)
        if (std::abs(mine[i].start - theirs[i].start) > tolerance || std::abs(mine[i].end - theirs[i].end) > tolerance)
          return false;
    }
  return true;
}

}  // namespace loom::sim::detail
