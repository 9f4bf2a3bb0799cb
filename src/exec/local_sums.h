// Private to materialization: gradient accumulation. A device holding several value parts of one box
// (the micro-batches' partial sums of a weight gradient) adds them up before any of them moves, so one
// reduction per step follows instead of one per micro-batch. Each device's sum is a part of a coarser
// decomposition, named by the rank of the set of parts it sums (exec_plan.h: combine).
#pragma once

#include <functional>
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
std::optional<std::vector<LocalSum>> plan_local_sums(const ProgramBuilder& builder, std::span<const BufferId> sources,
                                                     bool single_parts = false);

// The buffers holding `parts` now: partial sums already added into a running sum replaced by it
// (gradient_accumulation.h).
using CurrentSums = std::function<std::vector<BufferId>(std::span<const BufferId>)>;

// For a consumer op reading value parts of `tensor` that are not produced as it reads them: when the
// parts of the op read, per box, parts j of m of that box (each device one piece), and the devices
// holding `written` (the producer outputs) hold several parts of each box whose local sums are parts of
// m, each sum (its parts' running sums, `current`, added up) is read for one j: on its own device, else
// sent from a device holding it: the one that has sent fewest sums so far, then the nearest (tp ranks
// holding replicas of a head's sum send one each; a pipeline's last stage sends its micro-batches' sum of
// a tied embedding's gradient once). Keyed by (device, piece read); empty when not so.
// Only the parts reading `box_read` (a normalized box) are served: each box read (a micro-batch's rows)
// is decided when its first part is materialized, its producers written by then, and every check is made
// before any instruction is emitted.
NeedMap<BufferId> summed_in_place(ProgramBuilder& builder, const plan::Plan& plan, ir::OpId op, ir::TensorId tensor,
                                  const std::vector<plan::IndexRange>& box_read, std::span<const BufferId> written,
                                  const CurrentSums& current);

}  // namespace loom::exec::detail
