// The Z3 encoding of an order request (order_search.h states the model). Internal to the search library.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include <z3++.h>

#include "loom/search/order_bounds.h"
#include "loom/search/order_request.h"

namespace loom::search {

// One constraint the model can leave out, for the unsat core: an order constraint (by index) or the
// memory cap at one holding block.
struct TrackedPart {
  enum class Kind : std::uint8_t { constraint, memory_cap } kind = Kind::constraint;
  int index = 0;  // the constraint, or the holding block
};

class OrderZ3Model {
 public:
  // With `tracked`, the order constraints and the memory caps are asserted under one literal each
  // (tracked_literals, parts), for an unsat core; `graph` must then leave the constraints out. The caps of
  // the devices marked in `memory_in_graph` are left to the graph's edges (memory_edges).
  OrderZ3Model(z3::context& ctx, const OrderRequest& request, const OrderGraph& graph, bool tracked,
               const std::vector<bool>& memory_in_graph = {});

  z3::solver& solver() { return solver_; }
  // The literal that, assumed, bounds the makespan by `bound`.
  z3::expr makespan_at_most(std::int64_t bound);
  // Per device, the blocks in the model's start order.
  std::vector<std::vector<int>> order(const z3::model& model) const;

  const std::vector<z3::expr>& tracked_literals() const { return tracked_; }
  const std::vector<TrackedPart>& parts() const { return parts_; }
  int decided_pairs() const { return static_cast<int>(pair_.size()); }

 private:
  // [a before b] for two blocks of one device: a constant where a path orders them, else a pair literal.
  z3::expr before(int a, int b) const;
  void add(const z3::expr& e, TrackedPart part, bool tracked);

  z3::context& ctx_;
  const OrderRequest& request_;
  const OrderGraph& graph_;
  z3::solver solver_;
  std::vector<z3::expr> start_;
  z3::expr makespan_;
  std::unordered_map<std::uint64_t, z3::expr> pair_;  // key a * n + b with a < b: [a before b]
  std::vector<z3::expr> tracked_;
  std::vector<TrackedPart> parts_;
};

}  // namespace loom::search
