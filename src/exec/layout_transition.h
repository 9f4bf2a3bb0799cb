// Private to materialization: moving one group of pieces with the RVD layout search (comm/search.h)
// and lowering its steps to instructions.
#pragma once

#include <map>
#include <optional>
#include <tuple>
#include <span>

#include "loom/comm/cost_model.h"
#include "loom/comm/search.h"
#include "piece_layout.h"
#include "program_builder.h"

namespace loom::exec::detail {

struct SearchContext {
  const cluster::Cluster& cluster;
  const comm::CommCostModel& cost;
  const comm::SearchOptions& options;
  comm::TransitionCache& cache;
  // Plans by (region shape, dtype, producer, consumer) as given: within one materialization the
  // cluster and cost model are fixed, so this skips the cache's validation and text key, which
  // thousands of repeated transitions (every layer, every data-parallel group) would pay.
  std::map<std::tuple<std::vector<std::int64_t>, ir::DType, comm::Layout, comm::Layout>, comm::TransitionPlan>& memo;
};

// `producers` (buffers on distinct devices) to `needs` (pieces on distinct devices), both over `region`.
// The needs hold one value part, the frame (whole, or e.g. the sum of one micro-batch's partial sums),
// and the producers parts of it: the frame moves as if it were the tensor. Returns the buffers holding
// the needs, in order; nullopt when either side is not an RVD layout of the frame over the region, so
// the caller falls back.
Expected<std::optional<std::vector<BufferId>>> layout_transition(ProgramBuilder& builder, const SearchContext& search,
                                                                 std::span<const BufferId> producers,
                                                                 std::span<const PlacedPiece> needs);

}  // namespace loom::exec::detail
