// What the order search knows before it calls the solver (order_search.h): the precedence graph of a
// request and what follows from it, a makespan lower bound, and a greedy order (an upper bound).
//
// Precedence: a -> b for every dependency, constraint and release (b starts after a ends). Its transitive
// closure fixes the order of many pairs of blocks of one device, so the solver decides only the rest.
// head(b): the longest chain of durations that must end before b starts; tail(b): the longest that must
// run after b ends. Lower bound: the longest chain head + duration + tail, and per device the one-machine
// relaxation min head + the device's work + min tail (Carlier's bound for a machine that runs one block
// at a time).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "loom/search/order_request.h"

namespace loom::search {

struct OrderGraph {
  std::vector<std::vector<int>> predecessors;  // per block
  std::vector<int> topological;                // every block, predecessors first; empty when cyclic
  std::vector<std::int64_t> head, tail;        // per block (0 when cyclic)
  std::vector<std::vector<std::uint64_t>> reach;  // reach[a] bit b: a path a -> b (empty when cyclic)

  bool cyclic() const { return topological.size() != predecessors.size(); }
  bool precedes(int a, int b) const;  // a path a -> b
};

// The graph of a checked request, with `extra` edges; with_constraints false leaves the order constraints
// out (the dependencies and releases alone, acyclic in a checked request).
OrderGraph order_graph(const OrderRequest& request, bool with_constraints = true,
                       const std::vector<OrderEdge>& extra = {});

// The graph of the orders that end by `bound`: two blocks a, b of one device not yet ordered are ordered
// b -> a when a before b cannot end by then (head(a) + duration(a) + duration(b) + tail(b) > bound), and
// heads and tails are recomputed until nothing changes (immediate selection on the disjunctive graph).
// Nothing when no order ends by `bound` (a block or a pair that cannot, or a cycle).
// `graph` is order_graph(request, true, extra).
std::optional<OrderGraph> window_graph(const OrderRequest& request, const OrderGraph& graph,
                                       const std::vector<OrderEdge>& extra, std::int64_t bound);

// Memory caps that are order constraints: on a device whose holding blocks all hold the same h units,
// each released by its own block, holders and releases each ordered by the graph (first in, first out:
// a pipeline's activations), the cap c allows k = c / h held at once, so the i-th holder may start only
// after the release of the (i - k)-th has ended: exactly the edges release(i - k) -> holder(i). Per
// device, whether its cap became such edges (`exact`; a device whose cap never binds counts as exact).
std::vector<OrderEdge> memory_edges(const OrderRequest& request, const OrderGraph& graph, std::vector<bool>& exact);

// No order of the request ends before this (acyclic graph).
std::int64_t makespan_lower_bound(const OrderRequest& request, const OrderGraph& graph);

// A list schedule: repeatedly the block that can start earliest among those whose predecessors have been
// placed and whose memory fits its device's cap (ties: the longer tail, then the lower index). Nothing
// when every device is stuck on its cap (acyclic graph).
std::optional<std::vector<std::vector<int>>> greedy_order(const OrderRequest& request, const OrderGraph& graph);

}  // namespace loom::search
