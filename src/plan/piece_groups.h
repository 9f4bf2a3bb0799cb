// Private to plan validation: grouping the pieces of a tensor by equal boxes (and value parts) without
// allocating a key per piece. A plan of 64 devices holds hundreds of thousands of pieces, most of them
// replicas or value parts of a few distinct boxes, so validation works on the distinct ones.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "loom/plan/plan.h"

namespace loom::plan::detail {

struct PieceRef {
  std::uint64_t fingerprint = 0;
  const SubTensor* piece = nullptr;
  SubOpId owner;
};

// Sorts `refs` (fingerprints from piece_hash with the same `with_value`) and returns where each group of equal
// pieces begins, plus refs.size() at the end.
std::vector<std::size_t> group_equal(std::vector<PieceRef>& refs, bool with_value);

}  // namespace loom::plan::detail
