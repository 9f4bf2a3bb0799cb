// Private to materialization: gradient accumulation as the micro-batches go. Each micro-batch's backward
// writes its partial sum of a weight gradient (a value part); a device's partial sums of one box are added
// pairwise as soon as two of the same level exist, so at most log2(k) + 1 of its k partial sums are alive
// at any time instead of all k until the step reduces them. Each sum is a part of a coarser decomposition
// (exec_plan.h: combine): at level L, block i of the device whose set of parts ranks q among the H distinct
// sets of the box is part i x H + q of H x k / 2^L; the last level names the device's whole sum part q of
// H, as local_sums.h would. Only final gradients (read whole by optimizer steps) whose every holder of a
// box holds the same power of two k >= 2 of its parts are accumulated so; others are summed at once when
// read (local_sums.h).
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

  ProgramBuilder& builder_;
  std::map<Key, Slot> slots_;
  std::map<std::uint32_t, BufferId> sum_of_;  // a partial sum -> the sum it was added into
};

}  // namespace loom::exec::detail
