// Private to materialization: making a set of pieces of one tensor available on their devices from the
// buffers that hold it, for needs that no consumer op groups (resident pieces, step closing).
#pragma once

#include <optional>
#include <span>
#include <vector>

#include "layout_transition.h"
#include "piece_layout.h"
#include "program_builder.h"

namespace loom::exec::detail {

// layout_transition, after summing on each device the value parts it holds of one box (local_sums.h),
// so that one collective reduces the micro-batches' partial sums once per step instead of the fallback
// fetching every part. The sums are emitted only when they and the needs are RVD layouts.
Expected<std::optional<std::vector<BufferId>>> move_group(ProgramBuilder& builder, const SearchContext& search,
                                                          std::span<const BufferId> sources,
                                                          std::span<const PlacedPiece> needs);

// Buffers holding `needs`, in order, from `sources` (buffers of the tensor whose distinct labels
// partition it, as a producing op's parts do; or partition one value part of it, the frame every need
// holds: layout_transition.h): a source on the need's device with its piece is used in place; the other
// needs are grouped through the sources their boxes meet and each group moved by move_group, else (or
// without the layout search) fetched piece by piece. The groups' searches run at once: their steps are
// joined (concurrent_steps.h).
Expected<std::vector<BufferId>> move_pieces(ProgramBuilder& builder, const SearchContext& search,
                                            std::span<const BufferId> sources, std::span<const PlacedPiece> needs,
                                            bool use_layout_search);

}  // namespace loom::exec::detail
