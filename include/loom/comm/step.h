// A communication step: one primitive run by concurrent device groups, the unit the cost model prices.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace loom::comm {

enum class Primitive : std::uint8_t {
  all_reduce,
  all_gather,
  reduce_scatter,
  all_to_all,
  local_chunk,        // keep a slice of what is held: no communication
  local_value_split,  // keep the value on one device of a group, zero the rest: no communication
  p2p,                // a set of point-to-point sends (move, broadcast, RD-scatter/gather, plain p2p)
};

std::string_view name(Primitive primitive);  // "all-reduce", "p2p", ...
bool is_collective(Primitive primitive);     // the four ring/pairwise collectives

// One point-to-point send of `bytes` from `src` to `dst`.
struct Transfer {
  int src = 0;
  int dst = 0;
  std::int64_t bytes = 0;
  bool operator==(const Transfer&) const = default;
};

struct Step {
  std::string rule;  // the transition rule that made it, e.g. "V->R all-reduce", "RD-scatter"
  Primitive primitive = Primitive::p2p;
  // Collectives: the devices of each concurrent group, each group in the order its members' pieces
  // are concatenated (member a holds sub-chunk a).
  std::vector<std::vector<int>> groups;
  // S of REFERENCE.md's ring formulas: all-reduce, reduce-scatter and all-to-all take the per-device
  // input size, all-gather the per-device output size. For p2p, the total bytes sent.
  std::int64_t buffer_bytes = 0;
  // Bytes each member sends (collectives: 2(n−1)/n·S for all-reduce, (n−1)/n·S otherwise); for p2p the
  // most any one device receives.
  std::int64_t bytes_per_device = 0;
  std::vector<Transfer> transfers;  // p2p only
  // p2p only: the most bytes one device receives as value parts it must add to others (V->R or V->D by
  // plain sends). A collective reduces inside its kernel; after sends a separate kernel sums them.
  std::int64_t summed_bytes = 0;
  bool operator==(const Step&) const = default;
};

// "V->R all-reduce: 1 group of 8 [0-7], 28.0 MiB per device" (one line).
std::string describe(const Step& step);

}  // namespace loom::comm
