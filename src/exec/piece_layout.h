// Private to materialization: recognising RVD layouts (comm/layout.h) in a set of pieces.
#pragma once

#include <optional>
#include <span>
#include <vector>

#include "loom/comm/layout.h"
#include "loom/plan/sub_tensor.h"

namespace loom::exec::detail {

struct PlacedPiece {
  int device = 0;
  plan::SubTensor piece;
};

// The smallest box holding every piece, contiguous in every dimension; nullopt when a piece is strided
// (an RVD chunk is contiguous).
std::optional<std::vector<plan::IndexRange>> bounding_box(std::span<const PlacedPiece> pieces);

// The layout of `pieces` over `region` (treated as a tensor of the region's sizes) when they are an RVD:
// distinct devices; along each dimension the boxes are the d_i even contiguous chunks of the region;
// all value parts of one count v, every index present; every (chunk, value index) held by the same
// number r of devices. Replicas are ordered by device.
std::optional<comm::Layout> layout_of(std::span<const PlacedPiece> pieces, std::span<const plan::IndexRange> region);

// The piece the device at `position` of `layout` holds, as a SubTensor of `tensor` (offset by the region).
plan::SubTensor piece_at(const comm::Layout& layout, std::size_t position, ir::TensorId tensor,
                         std::span<const plan::IndexRange> region);

ir::Shape region_shape(std::span<const plan::IndexRange> region);

}  // namespace loom::exec::detail
