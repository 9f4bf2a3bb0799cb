// The annotation of a reshape, built so that a plan can still split it: input and output dims are
// grouped greedily into runs with equal products, and each run becomes one identifier ("a -> a"),
// a merge ("a b -> (a b)") or a split ("(a b) -> a b", all but the first size supplied). Splitting
// the first (outermost) factor of a run keeps every shard contiguous, so it stays a local reshape.
// A run with several dims on both sides (e.g. [6, 4] -> [4, 6]) has no such factor and is frozen.
// Size-1 dims are the number 1 on their side and join no run.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "loom/core/error.h"
#include "loom/ir/op_def.h"
#include "loom/ir/shape.h"

namespace loom::ops {

// `target` with its one -1 (if any) resolved against `from`'s element count.
Expected<ir::Shape> resolve_target_shape(const ir::Shape& from, std::span<const std::int64_t> target,
                                         std::string_view op);

// E.g. [8, 128, 768] -> [8, 128, 12, 64]: "a b (c d) -> a b c d" with sizes {d: 64}.
// Fails when the element counts differ, naming both shapes.
Expected<ir::OpSignature> reshape_signature(const ir::Shape& from, const ir::Shape& to, std::string_view op);

}  // namespace loom::ops
