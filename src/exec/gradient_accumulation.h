// Private to materialization: gradient accumulation as the micro-batches go. Each micro-batch's backward
// writes its partial sum of a weight gradient (a value part); a device's partial sums of one box are added
// pairwise as soon as two of the same level exist, so at most log2(k) + 1 of its k partial sums are alive
// at any time instead of all k until the step reduces them. Each sum is a part of a coarser decomposition
// (exec_plan.h: combine): at level L, block i of the device whose set of parts ranks q among the H distinct
// sets of the box is part i x H + q of H x k / 2^L; the last level names the device's whole sum part q of
// H, as local_sums.h would. For k = 2^a x b (b odd) the pairs stop at level a and its b sums are added
// when read (six parts: three pairs, then one sum of three). Final gradients (read whole by optimizer
// steps) and activations, forward and backward (coshard's row-parallel partial sums and its parts' input
// gradients, policy/coshard.h), whose every holder of a box holds the same even k of its parts are
// accumulated so; others are summed at once when read (local_sums.h).
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
  // Adds `part`, the next of the `count` value parts of a piece that arrive in order (part J of count at
  // the J-th call), into the running sums of its device and box: pairwise when count is a power of two,
  // else all at once when read.
  void add_part(BufferId part, std::int64_t count);

  // `sources` with every partial sum already added up replaced by the sum holding it (once each).
  std::vector<BufferId> current(std::span<const BufferId> sources) const;

 private:
  struct Level {
    int level = 0;
    std::int64_t block = 0;
    BufferId buffer;
  };
  struct Slot {
    std::int64_t rank = 0;     // q
    std::int64_t sets = 1;     // H
    std::int64_t parts = 0;    // k
    std::int64_t arrived = 0;  // level-0 blocks so far
    std::vector<Level> stack;  // levels strictly decreasing from the bottom
  };
  using Key = std::tuple<std::uint32_t, int, std::vector<plan::IndexRange>>;  // (tensor, device, box)

  // Pushes `part` (level 0) onto the slot's stack and adds the sums of equal levels; `label`: the box.
  void add(Slot& slot, int device, plan::SubTensor label, BufferId part);

  ProgramBuilder& builder_;
  std::map<Key, Slot> slots_;       // sub-op outputs
  std::map<Key, Slot> partitions_;  // add_part's pieces
  std::map<std::uint32_t, BufferId> sum_of_;  // a partial sum -> the sum it was added into
};

}  // namespace loom::exec::detail
