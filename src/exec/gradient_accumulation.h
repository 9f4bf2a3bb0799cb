// Private to materialization: gradient accumulation as the micro-batches go. Each micro-batch's backward
// writes its partial sum of a weight gradient (a value part); a device adds its partial sums of one box
// into one running sum as each arrives (exec_plan.h: accumulate), so at most two of them are alive at any
// time (the running sum and the newest, three while their sum is written) instead of all k until the step
// reduces them, whatever k is: as a folded plan carries one sum per gradient (fold.h). The running sum is
// labelled as the part it is once complete: on the device whose set of parts ranks q among the H
// distinct sets of the box, part q of H, as local_sums.h names a device's sum. The terms are added in
// their order of arrival, ((p0 + p1) + p2) + ..., as a framework's accumulation into .grad does. Final
// gradients (read whole by optimizer steps) and activations, forward and backward (coshard's
// row-parallel partial sums and its parts' input gradients, policy/coshard.h), whose every holder of a
// box holds the same k >= 2 of its parts are accumulated so; others are summed at once when read
// (local_sums.h).
#pragma once

#include <map>
#include <span>
#include <tuple>
#include <vector>

#include "program_builder.h"

namespace loom::exec::detail {

class GradientAccumulator {
 public:
  GradientAccumulator(const plan::Plan& plan, ProgramBuilder& builder);

  // After `s` is emitted with `outputs`: adds its partial sums into the running sums of their device.
  void produced(const plan::SubOp& s, std::span<const BufferId> outputs);

  // Leaves the partial sums of `tensor` to the caller (a gradient reduced into its partition per
  // micro-batch: resident_tensors.h).
  void skip(ir::TensorId tensor);
  // Adds `part`, the next of the `count` value parts of a piece that arrive in order, into the running sum
  // of its device and box (complete: the whole piece).
  void add_part(BufferId part, std::int64_t count);

  // `sources` with every partial sum already added up replaced by the sum holding it (once each).
  std::vector<BufferId> current(std::span<const BufferId> sources) const;

 private:
  struct Slot {
    std::int64_t rank = 0;   // q
    std::int64_t sets = 1;   // H
    std::int64_t parts = 0;  // k
    BufferId sum;            // the running sum (the first part alone); invalid before the first
  };
  using Key = std::tuple<std::uint32_t, int, std::vector<plan::IndexRange>>;  // (tensor, device, box)

  // Adds `part` into the slot's running sum; `label`: the box. Two parts in all are added by a combine,
  // whose last rule names their sum exactly (they are the device's whole set); more by accumulate steps.
  void add(Slot& slot, int device, plan::SubTensor label, BufferId part);

  ProgramBuilder& builder_;
  std::map<Key, Slot> slots_;       // sub-op outputs
  std::map<Key, Slot> partitions_;  // add_part's pieces
  std::map<std::uint32_t, BufferId> sum_of_;  // a partial sum -> the sum it was added into
};

}  // namespace loom::exec::detail
