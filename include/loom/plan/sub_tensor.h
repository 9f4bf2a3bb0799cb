// What one operator instance reads or writes of a FullTensor: a box (a strided index range per
// dimension) and a value part. Two SubTensors of one FullTensor depend on each other when their
// boxes intersect (DESIGN.md, "FullTensor and SubTensor").
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "loom/core/error.h"
#include "loom/ir/ids.h"
#include "loom/ir/shape.h"
#include "loom/plan/index_range.h"
#include "loom/plan/value_part.h"

namespace loom::plan {

struct SubTensor {
  ir::TensorId tensor;
  std::vector<IndexRange> box;  // one range per dimension of the FullTensor
  ValuePart value;

  // The whole FullTensor of this shape.
  static SubTensor whole(ir::TensorId tensor, const ir::Shape& shape);

  ir::Shape local_shape() const;  // sizes of the box
  std::int64_t numel() const { return local_shape().numel(); }
  std::string to_string() const;  // "%3[0:4, 1:8:2] (1 of 2)"
  bool operator==(const SubTensor&) const = default;
};

// The same piece with every range normalized (IndexRange::normalized), so equal index sets compare equal.
SubTensor normalized(SubTensor piece);

// Equality of pieces as index sets (ranges compared normalized), with or without their value parts, and a
// hash consistent with it: keys for pieces without building normalized copies.
bool same_piece(const SubTensor& a, const SubTensor& b, bool with_value);
std::uint64_t piece_hash(const SubTensor& piece, bool with_value);

// The common box of two SubTensors of the same FullTensor (value parts ignored); nullopt when empty
// or of different tensors.
std::optional<std::vector<IndexRange>> box_intersection(const SubTensor& a, const SubTensor& b);

// The boxes of a and b (same FullTensor) share an element; box_intersection without building it.
bool boxes_meet(const SubTensor& a, const SubTensor& b);

// a and b share elements (boxes intersect) and value (intervals overlap): a data dependency when one
// writes and the other reads.
bool overlaps(const SubTensor& a, const SubTensor& b);

// Every element and value of `inner` is in `outer`.
bool contains(const SubTensor& outer, const SubTensor& inner);

// Coverage (DESIGN.md, validation): can the whole value of every element of `consumer`'s box be
// assembled from `producers`, i.e. at each element some producers whose value intervals are disjoint
// tile [0, 1)? Replicas (equal intervals) are fine; a straddling or missing part is not. The error
// names the first element range not covered and the value found there; `tensor_name` labels it.
Expected<void> check_coverage(const SubTensor& consumer, std::span<const SubTensor> producers,
                              std::string_view tensor_name);

}  // namespace loom::plan
