// The solver boundary of temporal order (DESIGN.md "Search", nnScaler §4 / Tessel): plain data in, a
// per-device order out, and an independent evaluator that recomputes an order's makespan and memory.
//
// Blocks run on devices, one at a time per device, each for its duration. A dependency or an order
// constraint a -> b says b starts after a ends (dependencies are the data flow; constraints are the
// user's op-order, nnScaler Tables 4 and 7, each named for messages). A block may hold memory from its
// start until the end of the block that releases it (a forward's activations until its backward or
// weight block, on the same device: the release is an implied a -> b); at every point of a device's
// order, the units held must stay within the device's cap. An order is, per device, its blocks in
// sequence; its times are the earliest ones (every block as soon as its device is free and its
// predecessors have ended), which for a fixed order no other timing beats.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "loom/core/error.h"

namespace loom::search {

// A memory cap that does not bind.
inline constexpr std::int64_t kNoMemoryCap = std::numeric_limits<std::int64_t>::max();

struct OrderBlock {
  std::string name;           // for messages ("F3 s2"); may be empty
  int device = 0;             // in [0, devices)
  std::int64_t duration = 1;  // in ticks, at least 1
  std::int64_t holds = 0;     // memory units held from its start until `released_by` ends
  int released_by = -1;       // the block whose end frees them (same device); -1: held to the end
};

struct OrderEdge {
  int before = 0;  // block indices: `after` starts once `before` has ended
  int after = 0;
};

struct OrderConstraint {
  int before = 0;
  int after = 0;
  std::string rule;  // where it comes from, for messages ("Table 7 (3)", "micro-batch order")
};

// The search's budget. Z3's resource limit counts its work, so a search stopped by it stops at the same
// point on every machine (deterministic); the wall clock is a guard that, when it is what stops the
// search, makes the result depend on the machine.
struct OrderBudget {
  std::uint64_t resource_limit = 5'000'000;  // Z3's rlimit per solver call (0: none); ~2 s on this box
  double seconds = 10;                       // the whole search (0: none)
};

struct OrderRequest {
  int devices = 0;
  std::vector<OrderBlock> blocks;
  std::vector<OrderEdge> dependencies;
  std::vector<OrderConstraint> constraints;
  std::vector<std::int64_t> memory_caps;  // per device, kNoMemoryCap where none; empty: no caps
  OrderBudget budget;
  // Whether the search starts from the greedy order's makespan (order_bounds.h); off, the solver finds
  // every order itself (to measure it, and where the greedy would only slow it down).
  bool greedy_upper_bound = true;
  // A known order (a template's, a pilot search's): the search starts from the better of it and the
  // greedy's, so its answer is never slower. Empty: none.
  std::vector<std::vector<int>> initial_order;
};

// "block 3 ('F3 s2')" or "block 3".
std::string block_label(const OrderRequest& request, int block);

// Errors naming the block or edge: fewer than 1 device, a block on no device, a duration below 1, negative
// holds, a release by a missing block or one on another device, an edge or constraint naming a missing
// block or a block itself, memory caps not one per device or negative, and dependencies (with the
// releases) that form a cycle. Constraints that conflict are the search's to report (an unsat core).
Expected<void> check_request(const OrderRequest& request);

struct OrderEvaluation {
  std::vector<std::int64_t> start;      // per block, its earliest start under the order
  std::int64_t makespan = 0;            // the last end (the first block starting at 0)
  std::vector<std::int64_t> peak_held;  // per device, the most units held at once
  std::vector<std::string> violations;  // broken constraints, dependencies against the order, caps exceeded;
                                        // a deadlock (times then left at 0). Empty: the order is valid.
};

// The independent evaluator: recomputes an order's times, memory and violations from the request alone.
// Errors (the order is malformed): not one list per device, a block missing, listed twice or on a
// device other than its own.
Expected<OrderEvaluation> evaluate_order(const OrderRequest& request, const std::vector<std::vector<int>>& order);

}  // namespace loom::search
