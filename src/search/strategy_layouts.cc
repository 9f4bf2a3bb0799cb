// Recognising the RVD layout of a sharded tensor's pieces (strategy_facts.h).
#include <map>

#include "strategy_facts.h"

namespace loom::search::detail {

MaybeLayout layout_of_pieces(std::span<const plan::SubTensor> pieces, const ir::Shape& shape) {
  if (pieces.empty()) return std::nullopt;
  const std::size_t rank = shape.rank();
  comm::Layout layout;
  layout.d.assign(rank, 1);
  const plan::SubTensor& first = pieces.front();
  layout.v = first.value.count;
  for (std::size_t i = 0; i < rank; ++i) {
    const std::int64_t extent = first.box[i].size();
    if (extent <= 0 || shape[i] % extent != 0) return std::nullopt;
    layout.d[i] = shape[i] / extent;
  }
  std::int64_t chunks = layout.v;
  for (std::int64_t d : layout.d) chunks *= d;
  const auto n = static_cast<std::int64_t>(pieces.size());
  if (n % chunks != 0) return std::nullopt;
  layout.r = n / chunks;
  // (value index, chunk per dimension) -> the devices holding it, ascending.
  std::map<std::vector<std::int64_t>, std::vector<int>> holders;
  for (std::size_t k = 0; k < pieces.size(); ++k) {
    const plan::SubTensor& piece = pieces[k];
    if (piece.value.count != layout.v || piece.box.size() != rank) return std::nullopt;
    std::vector<std::int64_t> key{piece.value.index};
    for (std::size_t i = 0; i < rank; ++i) {
      const plan::IndexRange& range = piece.box[i];
      const std::int64_t extent = shape[i] / layout.d[i];
      if (range.size() != extent || (extent > 1 && range.step != 1) || range.start % extent != 0) return std::nullopt;
      key.push_back(range.start / extent);
    }
    holders[key].push_back(static_cast<int>(k));
  }
  if (static_cast<std::int64_t>(holders.size()) != chunks) return std::nullopt;
  layout.devices.assign(pieces.size(), -1);
  for (const auto& [key, devices] : holders) {
    if (static_cast<std::int64_t>(devices.size()) != layout.r) return std::nullopt;
    for (std::int64_t replica = 0; replica < layout.r; ++replica) {
      comm::GridCoord coord{replica, key[0]};
      coord.insert(coord.end(), key.begin() + 1, key.end());
      layout.devices[layout.position_of(coord)] = devices[static_cast<std::size_t>(replica)];
    }
  }
  return layout;
}

}  // namespace loom::search::detail
