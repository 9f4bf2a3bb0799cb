// The device mapping every intra-group rule shares: move a factor k from one grid axis to another.
//
// Precondition: before.grid()[from] % k == 0, from != to. The device at coordinate x moves to y with
//   y[from] = x[from] / k,   y[to] = x[to] · k + x[from] % k,   other axes unchanged,
// i.e. the factor leaves as the inner part of its source index and becomes the inner part of its target
// index. That keeps D semantics exact: merging chunks takes k neighbours (b·k .. b·k+k−1 become chunk b),
// splitting a chunk c makes sub-chunks c·k + a. Devices that differ only in x[from] % k exchange data:
// they form one group, ordered by that sub-index (member a becomes sub-chunk a / replica a / part a).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "loom/comm/layout.h"

namespace loom::comm {

struct FactorShift {
  Layout after;  // on the same devices, in canonical grid order
  std::vector<std::vector<int>> groups;
};

FactorShift shift_factor(const Layout& before, std::size_t from_axis, std::size_t to_axis, std::int64_t k);

}  // namespace loom::comm
