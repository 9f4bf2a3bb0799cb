// Private to materialization: the groups in which a final gradient with resident pieces (ZeRO-2 and 3's
// partitioned gradients, plan/residence.h) is reduced into them. Its producers write value parts i of n;
// group J of m (m dividing n) holds parts J x n/m to (J + 1) x n/m - 1, which sum to part J of m (nested
// value parts: the policies split micro-batches first, so the dp ranks' partial sums of micro-batch k
// make group k of the micro-batch count). The groups are the most for which every group has a part on
// every device holding a resident piece: each is then reduced into the resident pieces as soon as it is
// complete, by a collective over the holders, and the groups' sums are added up there. One group (the
// whole gradient, reduced once complete) when the parts differ in count or no finer grouping spans the
// holders (data parallelism without micro-batches: each device's part is a group of one).
#pragma once

#include <cstdint>
#include <set>
#include <span>

#include "loom/plan/value_part.h"

namespace loom::exec::detail {

struct ProducedPart {
  int device = 0;
  plan::ValuePart value;
};

struct GradientGroups {
  std::int64_t count = 1;  // m
  std::int64_t parts = 0;  // n

  std::int64_t of(plan::ValuePart part) const { return part.index / (parts / count); }
};

// `produced`: every producer output of the gradient; `holders`: the devices of its resident pieces.
GradientGroups gradient_groups(std::span<const ProducedPart> produced, const std::set<int>& holders);

}  // namespace loom::exec::detail
