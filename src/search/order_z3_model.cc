// The Z3 encoding of an order request (order_z3_model.h, the model in order_search.h).
#include "order_z3_model.h"

#include <algorithm>

#include <fmt/format.h>

namespace loom::search {
namespace {

std::size_t us(int i) { return static_cast<std::size_t>(i); }

}  // namespace

OrderZ3Model::OrderZ3Model(z3::context& ctx, const OrderRequest& request, const OrderGraph& graph, bool tracked,
                           const std::vector<bool>& memory_in_graph)
    : ctx_(ctx), request_(request), graph_(graph), solver_(ctx, "QF_IDL"), makespan_(ctx.int_const("C")) {
  const int n = static_cast<int>(request.blocks.size());
  const auto duration = [&](int b) { return ctx.int_val(request.blocks[us(b)].duration); };
  for (int b = 0; b < n; ++b) start_.push_back(ctx.int_const(fmt::format("s{}", b).c_str()));
  for (int b = 0; b < n; ++b) {
    solver_.add(start_[us(b)] >= ctx.int_val(graph.head[us(b)]));
    solver_.add(start_[us(b)] + duration(b) + ctx.int_val(graph.tail[us(b)]) <= makespan_);
    for (int p : graph.predecessors[us(b)]) solver_.add(start_[us(b)] >= start_[us(p)] + duration(p));
  }
  // Per device, one literal per pair no path orders.
  std::vector<std::vector<int>> on_device(us(request.devices));
  for (int b = 0; b < n; ++b) on_device[us(request.blocks[us(b)].device)].push_back(b);
  for (const auto& blocks : on_device)
    for (std::size_t i = 0; i < blocks.size(); ++i)
      for (std::size_t j = i + 1; j < blocks.size(); ++j) {
        const int a = blocks[i], b = blocks[j];
        if (graph.precedes(a, b) || graph.precedes(b, a)) continue;
        const z3::expr o = ctx.bool_const(fmt::format("o{}_{}", a, b).c_str());
        pair_.emplace(static_cast<std::uint64_t>(a) * us(n) + us(b), o);
        solver_.add(z3::ite(o, start_[us(b)] >= start_[us(a)] + duration(a), start_[us(a)] >= start_[us(b)] + duration(b)));
      }
  // Tracked, the constraints are not in the graph: each is one more precedence (on one device, the pair's
  // order too).
  if (tracked)
    for (std::size_t k = 0; k < request.constraints.size(); ++k) {
      const OrderConstraint& c = request.constraints[k];
      z3::expr e = start_[us(c.after)] >= start_[us(c.before)] + duration(c.before);
      if (request.blocks[us(c.before)].device == request.blocks[us(c.after)].device) e = e && before(c.before, c.after);
      add(e, {TrackedPart::Kind::constraint, static_cast<int>(k)}, true);
    }
  // Memory: while b runs, its device holds what the blocks before it (and b) took, less what the blocks
  // before it released.
  for (int d = 0; d < request.devices; ++d) {
    if (!memory_in_graph.empty() && memory_in_graph[us(d)]) continue;
    const std::int64_t cap = request.memory_caps.empty() ? kNoMemoryCap : request.memory_caps[us(d)];
    std::int64_t total = 0;
    for (int a : on_device[us(d)]) total += request.blocks[us(a)].holds;
    if (total <= cap) continue;
    for (int b : on_device[us(d)]) {
      const OrderBlock& blk = request.blocks[us(b)];
      if (blk.holds == 0) continue;
      z3::expr held = ctx.int_val(blk.holds);
      for (int a : on_device[us(d)]) {
        const OrderBlock& other = request.blocks[us(a)];
        if (a == b || other.holds == 0) continue;
        held = held + z3::ite(before(a, b), ctx.int_val(other.holds), ctx.int_val(0));
        if (other.released_by >= 0 && other.released_by != b)
          held = held - z3::ite(before(other.released_by, b), ctx.int_val(other.holds), ctx.int_val(0));
      }
      add(held.simplify() <= ctx.int_val(cap), {TrackedPart::Kind::memory_cap, b}, tracked);
    }
  }
}

z3::expr OrderZ3Model::before(int a, int b) const {
  if (graph_.precedes(a, b)) return ctx_.bool_val(true);
  if (graph_.precedes(b, a)) return ctx_.bool_val(false);
  const std::uint64_t n = request_.blocks.size();
  const auto it = pair_.find(static_cast<std::uint64_t>(std::min(a, b)) * n + us(std::max(a, b)));
  return a < b ? it->second : !it->second;
}

void OrderZ3Model::add(const z3::expr& e, TrackedPart part, bool tracked) {
  if (!tracked) {
    solver_.add(e);
    return;
  }
  const z3::expr literal = ctx_.bool_const(fmt::format("t{}", tracked_.size()).c_str());
  solver_.add(z3::implies(literal, e));
  tracked_.push_back(literal);
  parts_.push_back(part);
}

z3::expr OrderZ3Model::makespan_at_most(std::int64_t bound) {
  const z3::expr literal = ctx_.bool_const(fmt::format("C_le_{}", bound).c_str());
  solver_.add(z3::implies(literal, makespan_ <= ctx_.int_val(bound)));
  return literal;
}

std::vector<std::vector<int>> OrderZ3Model::order(const z3::model& model) const {
  std::vector<std::vector<std::pair<std::int64_t, int>>> timed(us(request_.devices));
  for (std::size_t b = 0; b < start_.size(); ++b)
    timed[us(request_.blocks[b].device)].emplace_back(model.eval(start_[b], true).get_numeral_int64(),
                                                      static_cast<int>(b));
  std::vector<std::vector<int>> out(us(request_.devices));
  for (int d = 0; d < request_.devices; ++d) {
    std::ranges::sort(timed[us(d)]);  // durations >= 1: no two blocks of a device share a start
    for (const auto& [s, b] : timed[us(d)]) out[us(d)].push_back(b);
  }
  return out;
}

}  // namespace loom::search
