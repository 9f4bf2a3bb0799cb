// The order request's checks and its independent evaluator (order_request.h).
#include "loom/search/order_request.h"

#include <algorithm>

#include <fmt/format.h>

#include "loom/core/strings.h"
#include "loom/search/order_bounds.h"

namespace loom::search {
namespace {

std::size_t us(int i) { return static_cast<std::size_t>(i); }

}  // namespace

std::string block_label(const OrderRequest& request, int block) {
  const std::string& name = request.blocks[us(block)].name;
  return name.empty() ? fmt::format("block {}", block) : fmt::format("block {} ('{}')", block, name);
}

Expected<void> check_request(const OrderRequest& request) {
  if (request.devices < 1)
    return fail(fmt::format("order request: {} devices", request.devices), "give at least one device");
  const int n = static_cast<int>(request.blocks.size());
  for (int i = 0; i < n; ++i) {
    const OrderBlock& b = request.blocks[us(i)];
    const std::string label = block_label(request, i);
    if (b.device < 0 || b.device >= request.devices)
      return fail(fmt::format("order request: {} is on device {}, outside the {} devices", label, b.device,
                              request.devices));
    if (b.duration < 1)
      return fail(fmt::format("order request: {} lasts {} ticks", label, b.duration),
                  "give every block at least one tick (scale the costs to integers)");
    if (b.holds < 0) return fail(fmt::format("order request: {} holds {} memory units", label, b.holds));
    if (b.released_by >= n || b.released_by == i || (b.released_by < 0 && b.released_by != -1))
      return fail(fmt::format("order request: {} is released by block {}, which is not another block", label,
                              b.released_by));
    if (b.released_by >= 0 && request.blocks[us(b.released_by)].device != b.device)
      return fail(fmt::format("order request: {} on device {} is released by {} on device {}", label, b.device,
                              block_label(request, b.released_by), request.blocks[us(b.released_by)].device),
                  "memory is released on the device that holds it");
  }
  const auto valid = [&](int before, int after) {
    return before >= 0 && before < n && after >= 0 && after < n && before != after;
  };
  for (std::size_t e = 0; e < request.dependencies.size(); ++e)
    if (const OrderEdge& d = request.dependencies[e]; !valid(d.before, d.after))
      return fail(fmt::format("order request: dependency {} joins blocks {} and {} of {}", e, d.before, d.after, n));
  for (std::size_t k = 0; k < request.constraints.size(); ++k)
    if (const OrderConstraint& c = request.constraints[k]; !valid(c.before, c.after))
      return fail(fmt::format("order request: constraint {} ({}) joins blocks {} and {} of {}", k, c.rule, c.before,
                              c.after, n));
  if (!request.memory_caps.empty()) {
    if (request.memory_caps.size() != us(request.devices))
      return fail(fmt::format("order request: {} memory caps for {} devices", request.memory_caps.size(),
                              request.devices),
                  "give one cap per device (kNoMemoryCap where none), or none");
    for (int d = 0; d < request.devices; ++d)
      if (request.memory_caps[us(d)] < 0)
        return fail(fmt::format("order request: device {} has the memory cap {}", d, request.memory_caps[us(d)]));
  }
  if (const OrderGraph graph = order_graph(request, false); graph.cyclic()) {
    std::vector<bool> placed(request.blocks.size(), false);
    for (int b : graph.topological) placed[us(b)] = true;
    const int b = static_cast<int>(std::ranges::find(placed, false) - placed.begin());
    return fail(fmt::format("order request: the dependencies and releases form a cycle ({} waits on it)",
                            block_label(request, b)),
                "the data flow must be acyclic");
  }
  return {};
}

Expected<OrderEvaluation> evaluate_order(const OrderRequest& request, const std::vector<std::vector<int>>& order) {
  LOOM_RETURN_IF_ERROR(check_request(request));
  const std::size_t n = request.blocks.size();
  if (order.size() != us(request.devices))
    return fail(fmt::format("order: {} device lists for {} devices", order.size(), request.devices));
  std::vector<int> device_of(n, -1), position(n, -1);
  for (int d = 0; d < request.devices; ++d)
    for (std::size_t k = 0; k < order[us(d)].size(); ++k) {
      const int b = order[us(d)][k];
      if (b < 0 || us(b) >= n) return fail(fmt::format("order: device {} lists block {} of {}", d, b, n));
      if (device_of[us(b)] >= 0) return fail(fmt::format("order: {} is listed twice", block_label(request, b)));
      if (request.blocks[us(b)].device != d)
        return fail(fmt::format("order: {} is listed on device {}, but runs on device {}", block_label(request, b), d,
                                request.blocks[us(b)].device));
      device_of[us(b)] = d, position[us(b)] = static_cast<int>(k);
    }
  for (std::size_t b = 0; b < n; ++b)
    if (device_of[b] < 0) return fail(fmt::format("order: {} is not listed", block_label(request, static_cast<int>(b))));

  OrderEvaluation result;
  const auto against_order = [&](int before, int after) {
    return device_of[us(before)] == device_of[us(after)] && position[us(before)] > position[us(after)];
  };
  for (const OrderConstraint& c : request.constraints)
    if (against_order(c.before, c.after))
      result.violations.push_back(fmt::format("constraint {}: {} runs before {} on device {}", c.rule,
                                              block_label(request, c.after), block_label(request, c.before),
                                              device_of[us(c.after)]));
  for (const OrderEdge& e : request.dependencies)
    if (against_order(e.before, e.after))
      result.violations.push_back(fmt::format("dependency: {} runs before its input {} on device {}",
                                              block_label(request, e.after), block_label(request, e.before),
                                              device_of[us(e.after)]));

  // Memory: per device, along its order, units held from a block's start until its release ends.
  result.peak_held.assign(us(request.devices), 0);
  for (int d = 0; d < request.devices; ++d) {
    std::int64_t held = 0, freed_after = 0;
    std::vector<std::int64_t> frees(order[us(d)].size(), 0);  // released when the block at this position ends
    for (int b : order[us(d)])
      if (const OrderBlock& blk = request.blocks[us(b)]; blk.released_by >= 0 && blk.holds > 0)
        frees[us(position[us(blk.released_by)])] += blk.holds;
    for (std::size_t k = 0; k < order[us(d)].size(); ++k) {
      const int b = order[us(d)][k];
      held += request.blocks[us(b)].holds - freed_after;
      result.peak_held[us(d)] = std::max(result.peak_held[us(d)], held);
      freed_after = frees[k];
      const std::int64_t cap = request.memory_caps.empty() ? kNoMemoryCap : request.memory_caps[us(d)];
      if (held > cap)
        result.violations.push_back(fmt::format("device {} holds {} units while {} runs, over its cap of {}", d, held,
                                                block_label(request, b), cap));
    }
  }

  // Times: each device runs its list in order, each block once its predecessors have ended. Start times
  // follow from the order alone, so running every device as far as it can, round after round, gives them;
  // a round without progress while blocks remain is a deadlock.
  const std::vector<std::vector<int>> preds = order_graph(request, true).predecessors;
  result.start.assign(n, 0);
  std::vector<std::int64_t> end(n, -1);
  std::vector<std::size_t> next(us(request.devices), 0);
  std::vector<std::int64_t> free(us(request.devices), 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int d = 0; d < request.devices; ++d)
      for (std::size_t& k = next[us(d)]; k < order[us(d)].size(); ++k) {
        const int b = order[us(d)][k];
        std::int64_t ready = free[us(d)];
        const bool waits = std::ranges::any_of(preds[us(b)], [&](int p) { return end[us(p)] < 0; });
        if (waits) break;
        for (int p : preds[us(b)]) ready = std::max(ready, end[us(p)]);
        result.start[us(b)] = ready;
        end[us(b)] = free[us(d)] = ready + request.blocks[us(b)].duration;
        progress = true;
      }
  }
  std::vector<std::string> waiting;
  for (int d = 0; d < request.devices; ++d)
    if (next[us(d)] < order[us(d)].size())
      waiting.push_back(fmt::format("device {} at {}", d, block_label(request, order[us(d)][next[us(d)]])));
  if (!waiting.empty()) {
    result.violations.push_back(fmt::format("the order deadlocks ({})", join(waiting, ", ")));
    std::ranges::fill(result.start, 0);
    return result;
  }
  result.makespan = n == 0 ? 0 : std::ranges::max(end);
  return result;
}

}  // namespace loom::search
