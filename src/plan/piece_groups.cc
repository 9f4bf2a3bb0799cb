#include "piece_groups.h"

#include <algorithm>

namespace loom::plan::detail {

std::vector<std::size_t> group_equal(std::vector<PieceRef>& refs, bool with_value) {
  // Equal fingerprints sort together; a (rare) collision inside a run is split by comparing pieces
  // with the run's first: unequal ones are moved behind it, and grouped on the next round.
  std::ranges::sort(refs, {}, &PieceRef::fingerprint);
  std::vector<std::size_t> starts;
  std::size_t at = 0;
  while (at < refs.size()) {
    std::size_t end = at + 1;
    while (end < refs.size() && refs[end].fingerprint == refs[at].fingerprint) ++end;
    const PieceRef head = refs[at];
    const auto split = std::partition(refs.begin() + static_cast<std::ptrdiff_t>(at), refs.begin() + static_cast<std::ptrdiff_t>(end),
                                      [&](const PieceRef& r) { return same_piece(*r.piece, *head.piece, with_value); });
    starts.push_back(at);
    at = static_cast<std::size_t>(split - refs.begin());
  }
  starts.push_back(refs.size());
  return starts;
}

}  // namespace loom::plan::detail
