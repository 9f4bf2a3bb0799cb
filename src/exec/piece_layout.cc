#include "piece_layout.h"

#include <algorithm>
#include <map>
#include <set>

namespace loom::exec::detail {

std::optional<std::vector<plan::IndexRange>> bounding_box(std::span<const PlacedPiece> pieces) {
  if (pieces.empty()) return std::nullopt;
  std::vector<plan::IndexRange> box;
  for (const PlacedPiece& p : pieces) {
    if (box.empty()) box.assign(p.piece.box.size(), plan::IndexRange{0, 0, 1});
    for (std::size_t d = 0; d < box.size(); ++d) {
      const plan::IndexRange r = p.piece.box[d].normalized();
      if (r.empty() || (r.step > 1 && r.size() > 1)) return std::nullopt;
      const bool first = &p == pieces.data();
      box[d].start = first ? r.start : std::min(box[d].start, r.start);
      box[d].stop = first ? r.last() + 1 : std::max(box[d].stop, r.last() + 1);
    }
  }
  return box;
}

ir::Shape region_shape(std::span<const plan::IndexRange> region) {
  ir::Shape shape;
  for (const plan::IndexRange& r : region) shape.dims.push_back(r.size());
  return shape;
}

std::optional<comm::Layout> layout_of(std::span<const PlacedPiece> pieces, std::span<const plan::IndexRange> region) {
  if (pieces.empty()) return std::nullopt;
  const std::size_t rank = region.size();
  comm::Layout layout;
  // Chunks per dimension: the distinct ranges must be the even blocks of the region.
  std::vector<std::vector<std::int64_t>> chunk_of(pieces.size(), std::vector<std::int64_t>(rank));
  for (std::size_t d = 0; d < rank; ++d) {
    std::set<std::int64_t> starts;
    for (const PlacedPiece& p : pieces) starts.insert(p.piece.box[d].start);
    const auto n = static_cast<std::int64_t>(starts.size());
    const std::int64_t size = region[d].size();
    if (size % n != 0) return std::nullopt;
    const std::int64_t block = size / n;
    for (std::size_t i = 0; i < pieces.size(); ++i) {
      const plan::IndexRange r = pieces[i].piece.box[d].normalized();
      const std::int64_t offset = r.start - region[d].start;
      if (offset % block != 0 || r.size() != block || (block > 1 && r.step != 1)) return std::nullopt;
      chunk_of[i][d] = offset / block;
    }
    layout.d.push_back(n);
  }
  // Value parts: one count, every index present.
  layout.v = pieces[0].piece.value.count;
  std::map<std::pair<std::vector<std::int64_t>, std::int64_t>, std::vector<int>> cells;
  std::set<int> devices;
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    const plan::ValuePart value = pieces[i].piece.value;
    if (value.count != layout.v) return std::nullopt;
    cells[{chunk_of[i], value.index}].push_back(pieces[i].device);
    if (!devices.insert(pieces[i].device).second) return std::nullopt;
  }
  const std::int64_t chunks = [&] {
    std::int64_t c = 1;
    for (std::int64_t d : layout.d) c *= d;
    return c;
  }();
  if (static_cast<std::int64_t>(cells.size()) != chunks * layout.v) return std::nullopt;
  layout.r = static_cast<std::int64_t>(cells.begin()->second.size());
  for (auto& [cell, holders] : cells) {
    if (static_cast<std::int64_t>(holders.size()) != layout.r) return std::nullopt;
    std::ranges::sort(holders);
  }
  layout.devices.resize(pieces.size());
  for (std::size_t p = 0; p < layout.devices.size(); ++p) {
    const comm::GridCoord c = layout.coord_of(p);
    const std::vector<std::int64_t> chunk(c.begin() + 2, c.end());
    const auto it = cells.find({chunk, c[comm::kAxisV]});
    if (it == cells.end()) return std::nullopt;
    layout.devices[p] = it->second[static_cast<std::size_t>(c[comm::kAxisR])];
  }
  return layout;
}

plan::SubTensor piece_at(const comm::Layout& layout, std::size_t position, ir::TensorId tensor,
                         std::span<const plan::IndexRange> region) {
  const comm::GridCoord c = layout.coord_of(position);
  plan::SubTensor piece{tensor, {}, plan::ValuePart::whole()};
  for (std::size_t d = 0; d < region.size(); ++d) {
    const std::int64_t block = region[d].size() / layout.d[d];
    const std::int64_t start = region[d].start + c[comm::axis_of_dim(d)] * block;
    piece.box.push_back(plan::IndexRange{start, start + block, 1});
  }
  if (layout.v > 1) piece.value = plan::ValuePart{c[comm::kAxisV], layout.v};
  return piece;
}

}  // namespace loom::exec::detail
