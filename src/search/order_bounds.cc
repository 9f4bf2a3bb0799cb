// The precedence graph, lower bound and greedy order of an order request (order_bounds.h).
#include "loom/search/order_bounds.h"

#include <algorithm>
#include <limits>

namespace loom::search {
namespace {

std::size_t us(int i) { return static_cast<std::size_t>(i); }

}  // namespace

bool OrderGraph::precedes(int a, int b) const {
  return !reach.empty() && ((reach[us(a)][us(b) / 64] >> (us(b) % 64)) & 1U) != 0;
}

OrderGraph order_graph(const OrderRequest& request, bool with_constraints, const std::vector<OrderEdge>& extra) {
  const std::size_t n = request.blocks.size();
  OrderGraph g;
  g.predecessors.resize(n);
  for (const OrderEdge& e : request.dependencies) g.predecessors[us(e.after)].push_back(e.before);
  for (const OrderEdge& e : extra) g.predecessors[us(e.after)].push_back(e.before);
  if (with_constraints)
    for (const OrderConstraint& c : request.constraints) g.predecessors[us(c.after)].push_back(c.before);
  for (std::size_t i = 0; i < n; ++i)
    if (const int r = request.blocks[i].released_by; r >= 0) g.predecessors[us(r)].push_back(static_cast<int>(i));
  for (auto& preds : g.predecessors) {
    std::ranges::sort(preds);
    preds.erase(std::ranges::unique(preds).begin(), preds.end());
  }
  // Kahn's algorithm, lowest index first among the free blocks (a deterministic order).
  std::vector<std::vector<int>> successors(n);
  std::vector<int> waiting(n, 0);
  for (std::size_t b = 0; b < n; ++b)
    for (int p : g.predecessors[b]) successors[us(p)].push_back(static_cast<int>(b)), ++waiting[b];
  for (std::size_t b = 0; b < n; ++b)
    if (waiting[b] == 0) g.topological.push_back(static_cast<int>(b));
  for (std::size_t k = 0; k < g.topological.size(); ++k)
    for (int s : successors[us(g.topological[k])])
      if (--waiting[us(s)] == 0) g.topological.push_back(s);
  g.head.assign(n, 0);
  g.tail.assign(n, 0);
  if (g.cyclic()) return g;
  for (int b : g.topological)
    for (int p : g.predecessors[us(b)])
      g.head[us(b)] = std::max(g.head[us(b)], g.head[us(p)] + request.blocks[us(p)].duration);
  const std::size_t words = (n + 63) / 64;
  g.reach.assign(n, std::vector<std::uint64_t>(words, 0));
  for (auto it = g.topological.rbegin(); it != g.topological.rend(); ++it) {
    const int b = *it;
    for (int s : successors[us(b)]) {
      g.tail[us(b)] = std::max(g.tail[us(b)], request.blocks[us(s)].duration + g.tail[us(s)]);
      g.reach[us(b)][us(s) / 64] |= std::uint64_t{1} << (us(s) % 64);
      for (std::size_t w = 0; w < words; ++w) g.reach[us(b)][w] |= g.reach[us(s)][w];
    }
  }
  return g;
}

std::optional<OrderGraph> window_graph(const OrderRequest& request, const OrderGraph& graph,
                                       const std::vector<OrderEdge>& base, std::int64_t bound) {
  std::vector<std::vector<int>> on_device(us(request.devices));
  for (std::size_t b = 0; b < request.blocks.size(); ++b) on_device[us(request.blocks[b].device)].push_back(static_cast<int>(b));
  const auto duration = [&](int b) { return request.blocks[us(b)].duration; };
  std::vector<OrderEdge> extra = base;
  OrderGraph g = graph;
  for (bool added = true; added;) {
    if (g.cyclic()) return std::nullopt;
    for (std::size_t b = 0; b < request.blocks.size(); ++b)
      if (g.head[b] + request.blocks[b].duration + g.tail[b] > bound) return std::nullopt;
    added = false;
    for (const auto& blocks : on_device)
      for (std::size_t i = 0; i < blocks.size(); ++i)
        for (std::size_t j = i + 1; j < blocks.size(); ++j) {
          const int a = blocks[i], b = blocks[j];
          if (g.precedes(a, b) || g.precedes(b, a)) continue;
          const bool a_first = g.head[us(a)] + duration(a) + duration(b) + g.tail[us(b)] <= bound;
          const bool b_first = g.head[us(b)] + duration(b) + duration(a) + g.tail[us(a)] <= bound;
          if (!a_first && !b_first) return std::nullopt;
          if (a_first != b_first) extra.push_back(a_first ? OrderEdge{a, b} : OrderEdge{b, a}), added = true;
        }
    if (added) g = order_graph(request, true, extra);
  }
  return g;
}

std::vector<OrderEdge> memory_edges(const OrderRequest& request, const OrderGraph& graph, std::vector<bool>& exact) {
  std::vector<std::vector<int>> holders(us(request.devices));
  std::vector<std::int64_t> total(us(request.devices), 0);
  for (int b : graph.topological)
    if (const OrderBlock& blk = request.blocks[us(b)]; blk.holds > 0)
      holders[us(blk.device)].push_back(b), total[us(blk.device)] += blk.holds;
  exact.assign(us(request.devices), false);
  std::vector<OrderEdge> edges;
  for (int d = 0; d < request.devices; ++d) {
    const std::int64_t cap = request.memory_caps.empty() ? kNoMemoryCap : request.memory_caps[us(d)];
    const std::vector<int>& h = holders[us(d)];
    if (total[us(d)] <= cap) {
      exact[us(d)] = true;
      continue;
    }
    const auto unit = request.blocks[us(h.front())].holds;
    const auto release = [&](std::size_t i) { return request.blocks[us(h[i])].released_by; };
    bool fifo = true;
    for (std::size_t i = 0; i < h.size() && fifo; ++i)
      fifo = request.blocks[us(h[i])].holds == unit && release(i) >= 0 &&
             (i == 0 || (graph.precedes(h[i - 1], h[i]) && graph.precedes(release(i - 1), release(i))));
    if (!fifo) continue;
    exact[us(d)] = true;
    const auto k = static_cast<std::size_t>(cap / unit);
    for (std::size_t i = k; i < h.size(); ++i) edges.push_back({release(i - k), h[i]});
  }
  return edges;
}

std::int64_t makespan_lower_bound(const OrderRequest& request, const OrderGraph& graph) {
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  std::int64_t bound = 0;
  std::vector<std::int64_t> work(us(request.devices), 0), head(us(request.devices), kMax),
      tail(us(request.devices), kMax);
  for (std::size_t b = 0; b < request.blocks.size(); ++b) {
    const OrderBlock& blk = request.blocks[b];
    bound = std::max(bound, graph.head[b] + blk.duration + graph.tail[b]);
    work[us(blk.device)] += blk.duration;
    head[us(blk.device)] = std::min(head[us(blk.device)], graph.head[b]);
    tail[us(blk.device)] = std::min(tail[us(blk.device)], graph.tail[b]);
  }
  for (int d = 0; d < request.devices; ++d)
    if (work[us(d)] > 0) bound = std::max(bound, head[us(d)] + work[us(d)] + tail[us(d)]);
  return bound;
}

std::optional<std::vector<std::vector<int>>> greedy_order(const OrderRequest& request, const OrderGraph& graph) {
  const std::size_t n = request.blocks.size();
  std::vector<std::vector<int>> order(us(request.devices));
  std::vector<std::vector<int>> successors(n);
  std::vector<int> waiting(n, 0);
  std::vector<std::int64_t> ready(n, 0), free(us(request.devices), 0), held(us(request.devices), 0);
  for (std::size_t b = 0; b < n; ++b)
    for (int p : graph.predecessors[b]) successors[us(p)].push_back(static_cast<int>(b)), ++waiting[b];
  std::vector<int> open;  // blocks whose predecessors are placed
  for (std::size_t b = 0; b < n; ++b)
    if (waiting[b] == 0) open.push_back(static_cast<int>(b));
  const auto cap = [&](int d) { return request.memory_caps.empty() ? kNoMemoryCap : request.memory_caps[us(d)]; };
  for (std::size_t placed = 0; placed < n; ++placed) {
    int pick = -1;
    std::int64_t pick_start = 0;
    for (int b : open) {
      const OrderBlock& blk = request.blocks[us(b)];
      if (blk.holds > cap(blk.device) - held[us(blk.device)]) continue;
      const std::int64_t start = std::max(ready[us(b)], free[us(blk.device)]);
      if (pick < 0 || start < pick_start ||
          (start == pick_start && (graph.tail[us(b)] > graph.tail[us(pick)] ||
                                   (graph.tail[us(b)] == graph.tail[us(pick)] && b < pick))))
        pick = b, pick_start = start;
    }
    if (pick < 0) return std::nullopt;
    std::erase(open, pick);
    const OrderBlock& blk = request.blocks[us(pick)];
    order[us(blk.device)].push_back(pick);
    const std::int64_t end = free[us(blk.device)] = pick_start + blk.duration;
    held[us(blk.device)] += blk.holds;
    for (int p : graph.predecessors[us(pick)])  // the releases this block ends
      if (request.blocks[us(p)].released_by == pick) held[us(blk.device)] -= request.blocks[us(p)].holds;
    for (int s : successors[us(pick)]) {
      ready[us(s)] = std::max(ready[us(s)], end);
      if (--waiting[us(s)] == 0) open.push_back(s);
    }
  }
  return order;
}

}  // namespace loom::search
