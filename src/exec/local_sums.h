// Private to materialization: gradient accumulation. A device holding several value parts of one box
// (the micro-batches' partial sums of a weight gradient) adds them up before any of them moves, so one
// reduction per step follows instead of one per micro-batch. Each device's sum is a part of a coarser
// decomposition, named by the rank of the set of parts it sums (exec_plan.h: combine).
#pragma once

#include <optional>
#include <span>
#include <vector>

#include "need_groups.h"
#include "program_builder.h"

namespace loom::exec::detail {

struct LocalSum {
  int device = 0;
  std::vector<BufferId> parts;
  plan::SubTensor label;  // the box, and part q of m: q the rank of the device's set of parts
};

// The local sums of `sources` (buffers of one tensor), or nullopt when no device holds several parts of
// one box (nothing to sum) or some box's parts are not spread evenly: every holder of the box holds k
// parts of one count n, and the distinct sets of indices the holders hold (replicas hold equal sets)
// partition 0..n-1, giving m = n / k parts.
std::optional<std::vector<LocalSum>> plan_local_sums(const ProgramBuilder& builder, std::span<const BufferId> sources);

// For a consumer op reading value parts of `tensor` that are not produced as it reads them: when every
// part of the op reads part j of m of one box, the devices reading distinct j, and each reading device's
// local sum of `written` is a part of m, the sums (emitted now), keyed by (device, piece read). Empty
// when not so.
NeedMap<BufferId> summed_in_place(ProgramBuilder& builder, const plan::Plan& plan, ir::OpId op, ir::TensorId tensor,
                                  std::span<const BufferId> written);

}  // namespace loom::exec::detail
