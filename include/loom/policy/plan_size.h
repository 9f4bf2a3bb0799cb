// How large an explicit (unfolded) plan gets, estimated before planning: shared by the job pipeline, which
// folds or refuses a large plan (api/job_load.cc), and the search, which must not pick a finalist the
// pipeline would refuse (search/analytic_cost.h).
#pragma once

#include <cstdint>

#include "loom/policy/policy.h"

namespace loom::policy {

// An explicit plan above this many sub-ops folds when it can (api::Fold::automatic).
inline constexpr std::int64_t kFoldAboveSubOps = 300'000;
// One whose planning memory exceeds what this many sub-ops take (ZeRO's sub-ops weigh more, by dp) and
// that does not fold is refused before planning rather than planned for minutes and many GB.
inline constexpr std::int64_t kExplicitSubOpLimit = 3'000'000;

// Forward ops x dp x tp x micro-batches x 3 (forward, backward, accumulations): the explicit plan's sub-ops.
// In doubles: the product of the degrees of a nonsense request must not overflow.
double explicit_sub_ops(std::int64_t forward_ops, const ParallelConfig& c, int micro_batches);
// The memory planning them takes (measured on gpt3-125m, plan_size.cc).
double explicit_plan_bytes(std::int64_t forward_ops, const ParallelConfig& c, int micro_batches);
// What kExplicitSubOpLimit sub-ops take without ZeRO (about 14 GiB).
double explicit_plan_bytes_limit();

// Whether a ZeRO plan can be folded (exec/fold.h): over micro-batches only (its slice keeps the dp replicas);
// ZeRO-1 across nodes (its gradients' hierarchical reduce-scatters and sends run once per step, on the
// accumulated gradient, as explicitly), ZeRO-2 and -3 within one node: across nodes the fold runs ZeRO-2's
// cross-node sends once per step where the explicit plan sends every micro-batch's shard (3-22 % faster,
// 9 % more memory on 2-3 nodes), and ZeRO-3's slice prefetches a block's first gathers from the block's
// start, where the explicit plan hides them behind the previous micro-batch (11 % slower); and not ZeRO-1
// with tp > 1 (its simulation finds a collective a member's representative does not run). Offload is the
// caller's to refuse.
bool zero_folds(const ParallelConfig& c, int gpus_per_node);

}  // namespace loom::policy
