#include "loom/plan/validate.h"

#include <algorithm>
#include <map>
#include <queue>

#include <fmt/format.h>

#include "loom/core/strings.h"
#include "loom/plan/residence.h"
#include "piece_groups.h"

namespace loom::plan {
namespace {

Expected<void> check_devices(const Plan& plan, int num_devices) {
  for (const SubOp& s : plan.sub_ops) {
    if (!s.live) continue;
    if (s.device == kUnassigned)
      return fail(fmt::format("sub-op '{}' is on no device", s.name), "assign every part of every op (assign(plan, sub_op, device))");
    if (s.device >= num_devices)
      return fail(fmt::format("sub-op '{}' is on device {}, but the plan has {} devices", s.name, s.device, num_devices));
  }
  return {};
}

// Every tensor some graph op produces must be produced whole: the parts of its producers tile it
// (a tensor whose producing parts are all gone is caught too).
Expected<void> check_production(const Plan& plan) {
  std::vector<std::vector<detail::PieceRef>> produced(plan.graph->tensors.size());
  std::vector<char> has_producer(plan.graph->tensors.size(), 0);
  for (const ir::Op& op : plan.graph->ops)
    for (ir::TensorId out : op.outputs) has_producer[out.index()] = 1;
  for (const SubOp& s : plan.sub_ops)
    if (s.live)
      for (const SubTensor& out : s.outputs) produced[out.tensor.index()].push_back({piece_hash(out, true), &out, s.id});
  // Replicas repeat a piece exactly; coverage needs each distinct piece once.
  for (std::size_t tensor = 0; tensor < produced.size(); ++tensor) {
    if (!has_producer[tensor]) continue;
    const std::vector<std::size_t> starts = detail::group_equal(produced[tensor], true);
    std::vector<SubTensor> pieces;
    pieces.reserve(starts.size());
    for (std::size_t g = 0; g + 1 < starts.size(); ++g) pieces.push_back(*produced[tensor][starts[g]].piece);
    const ir::FullTensor& full = plan.graph->tensor(ir::TensorId(static_cast<std::uint32_t>(tensor)));
    LOOM_RETURN_IF_ERROR(check_coverage(SubTensor::whole(full.id, full.shape), pieces, full.name));
  }
  return {};
}

// The cycle through `start` found by DFS colouring, as names "a -> b -> a".
std::string describe_cycle(const Plan& plan, const std::vector<SubOpId>& cycle) {
  std::vector<std::string> names;
  for (SubOpId id : cycle) names.push_back(plan.sub_op(id).name);
  names.push_back(plan.sub_op(cycle.front()).name);
  return join(names, " -> ");
}

Expected<void> check_acyclic(const Plan& plan, const std::vector<std::vector<SubOpId>>& edges) {
  enum : char { white, grey, black };
  std::vector<char> colour(plan.sub_ops.size(), white);
  std::vector<SubOpId> parent(plan.sub_ops.size());
  for (const SubOp& root : plan.sub_ops) {
    if (!root.live || colour[root.id.index()] != white) continue;
    // Iterative DFS: (node, next edge index).
    std::vector<std::pair<SubOpId, std::size_t>> stack = {{root.id, 0}};
    colour[root.id.index()] = grey;
    while (!stack.empty()) {
      auto& [node, next] = stack.back();
      const auto& out = edges[node.index()];
      if (next == out.size()) {
        colour[node.index()] = black;
        stack.pop_back();
        continue;
      }
      const SubOpId to = out[next++];
      if (colour[to.index()] == grey) {
        std::vector<SubOpId> cycle = {to};
        for (auto it = stack.rbegin(); it != stack.rend() && it->first != to; ++it) cycle.insert(cycle.begin() + 1, it->first);
        return fail(fmt::format("deadlock: the plan's dependencies form a cycle: {}", describe_cycle(plan, cycle)),
                    "remove an order edge on the cycle, or order the ops as their data flows");
      }
      if (colour[to.index()] == white) {
        colour[to.index()] = grey;
        stack.emplace_back(to, 0);
      }
    }
  }
  return {};
}

}  // namespace

std::vector<std::vector<SubOpId>> dependency_edges(const Plan& plan) {
  std::vector<std::vector<SubOpId>> edges(plan.sub_ops.size());
  // Per FullTensor, who writes and who reads each distinct box: parts of one op share few boxes
  // (replicas, value parts, other pieces of the same split), so boxes are intersected once per pair of
  // distinct boxes rather than once per pair of sub-ops.
  std::vector<std::vector<detail::PieceRef>> writers(plan.graph->tensors.size()), readers(plan.graph->tensors.size());
  for (const SubOp& s : plan.sub_ops) {
    if (!s.live) continue;
    for (const SubTensor& out : s.outputs) writers[out.tensor.index()].push_back({piece_hash(out, false), &out, s.id});
    const OpLayout& layout = plan.layouts[s.op.index()];
    for (std::size_t i = 0; i < s.inputs.size(); ++i)
      if (!layout.shape_only(i))
        readers[s.inputs[i].tensor.index()].push_back({piece_hash(s.inputs[i], false), &s.inputs[i], s.id});
  }
  for (std::size_t tensor = 0; tensor < readers.size(); ++tensor) {
    if (writers[tensor].empty() || readers[tensor].empty()) continue;  // leaves exist before the step
    const std::vector<std::size_t> in_groups = detail::group_equal(readers[tensor], false);
    const std::vector<std::size_t> out_groups = detail::group_equal(writers[tensor], false);
    for (std::size_t i = 0; i + 1 < in_groups.size(); ++i)
      for (std::size_t o = 0; o + 1 < out_groups.size(); ++o) {
        // A reader needs the whole value of its box: any writer of an overlapping box feeds it.
        const SubTensor& in = *readers[tensor][in_groups[i]].piece;
        const SubTensor& out = *writers[tensor][out_groups[o]].piece;
        bool meet = true;
        for (std::size_t d = 0; d < in.box.size() && meet; ++d) meet = !intersect(in.box[d], out.box[d]).empty();
        if (!meet) continue;
        for (std::size_t w = out_groups[o]; w < out_groups[o + 1]; ++w)
          for (std::size_t r = in_groups[i]; r < in_groups[i + 1]; ++r)
            if (writers[tensor][w].owner != readers[tensor][r].owner)
              edges[writers[tensor][w].owner.index()].push_back(readers[tensor][r].owner);
      }
  }
  for (const auto& [first, second] : plan.orders) edges[first.index()].push_back(second);
  for (auto& out : edges) {
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
  }
  return edges;
}

namespace {

// validate_plan, returning the dependency edges it checked.
Expected<std::vector<std::vector<SubOpId>>> validated_edges(const Plan& plan, int num_devices) {
  if (num_devices < 1) return fail(fmt::format("a plan needs at least one device, got {}", num_devices));
  LOOM_RETURN_IF_ERROR(check_devices(plan, num_devices));
  LOOM_RETURN_IF_ERROR(check_production(plan));
  std::vector<std::vector<SubOpId>> edges = dependency_edges(plan);
  LOOM_RETURN_IF_ERROR(check_acyclic(plan, edges));
  return edges;
}

}  // namespace

Expected<void> validate_plan(const Plan& plan, int num_devices) {
  LOOM_RETURN_IF_ERROR(validated_edges(plan, num_devices));
  return {};
}

namespace {

// The dependency graph order completion walks: the sub-ops' dependency edges, plus one node per final
// gradient with resident pieces (plan/residence.h) after every producer of the gradient and before
// every reader: materialization reduces such a gradient into its resident pieces once its last producer
// has run, and every reader reads those, a dependency on the whole tensor that the overlap of boxes does
// not give. One node per gradient, not an edge per (producer, reader) pair, which would be quadratic.
struct OrderGraph {
  std::vector<std::vector<SubOpId>> edges;  // nodes past the sub-ops are the gradients' nodes
  std::size_t sub_ops = 0;
};

OrderGraph order_graph(const Plan& plan, std::vector<std::vector<SubOpId>> edges) {
  OrderGraph graph{std::move(edges), plan.sub_ops.size()};
  const ir::Graph& ir = *plan.graph;
  std::vector<std::uint32_t> node_of(ir.tensors.size(), 0);  // 0: none
  for (const ir::FullTensor& t : ir.tensors)
    if (!persists(ir, t.id) && residence_of(plan, t.id) == Residence::optimizer_shards) {
      node_of[t.id.index()] = static_cast<std::uint32_t>(graph.edges.size());
      graph.edges.emplace_back();
    }
  for (const SubOp& s : plan.sub_ops) {
    if (!s.live) continue;
    for (const SubTensor& out : s.outputs)
      if (const std::uint32_t node = node_of[out.tensor.index()]; node != 0)
        graph.edges[s.id.index()].push_back(SubOpId(node));
    const OpLayout& layout = plan.layouts[s.op.index()];
    for (std::size_t i = 0; i < s.inputs.size(); ++i)
      if (const std::uint32_t node = node_of[s.inputs[i].tensor.index()]; node != 0 && !layout.shape_only(i))
        graph.edges[node].push_back(s.id);
  }
  for (std::size_t n = graph.sub_ops; n < graph.edges.size(); ++n) {
    auto& out = graph.edges[n];
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
  }
  return graph;
}

}  // namespace

Expected<ExecutionOrder> complete_order(const Plan& plan, int num_devices) {
  LOOM_ASSIGN_OR_RETURN(std::vector<std::vector<SubOpId>> edges, validated_edges(plan, num_devices));
  const OrderGraph graph = order_graph(plan, std::move(edges));
  std::vector<int> indegree(graph.edges.size(), 0);
  for (const auto& out : graph.edges)
    for (SubOpId to : out) ++indegree[to.index()];
  // Devices run side by side in unit-time rounds: each round, every device with ready sub-ops runs the
  // first of them by (program position of its op, id). A device's choice depends only on its own ready
  // set, which depends only on the rounds before, so devices related by a symmetry of the plan make the
  // same choices and get programs equal up to renaming (exec/device_classes.h). One global ready queue
  // would not: a device's order would depend on when other devices' sub-ops became ready.
  using Key = std::pair<std::uint32_t, std::uint32_t>;
  using Queue = std::priority_queue<Key, std::vector<Key>, std::greater<>>;
  std::vector<Queue> ready(static_cast<std::size_t>(num_devices));
  std::vector<int> busy;  // devices with ready sub-ops, each once
  std::vector<char> listed(static_cast<std::size_t>(num_devices), 0);
  std::vector<SubOpId> passed;  // gradient nodes whose producers have all run
  const auto make_ready = [&](SubOpId id) {
    if (id.index() >= graph.sub_ops) return passed.push_back(id);
    const SubOp& s = plan.sub_op(id);
    const auto device = static_cast<std::size_t>(s.device);
    ready[device].emplace(s.op.value, s.id.value);
    if (!listed[device]) listed[device] = 1, busy.push_back(s.device);
  };
  const auto arrive = [&](SubOpId to) {
    if (--indegree[to.index()] == 0) make_ready(to);
  };
  std::size_t live = 0;
  for (const SubOp& s : plan.sub_ops)
    if (s.live && (++live, indegree[s.id.index()] == 0)) make_ready(s.id);
  ExecutionOrder result;
  result.per_device.resize(static_cast<std::size_t>(num_devices));
  std::vector<Key> round;
  std::vector<int> devices;
  while (!busy.empty()) {
    round.clear();
    devices.swap(busy);
    busy.clear();
    for (int d : devices) {
      Queue& queue = ready[static_cast<std::size_t>(d)];
      round.push_back(queue.top());
      queue.pop();
      if (queue.empty()) listed[static_cast<std::size_t>(d)] = 0;
      else busy.push_back(d);
    }
    // Within a round the sub-ops are independent; emitted in (position, id) order, deterministic.
    std::sort(round.begin(), round.end());
    for (const auto& [position, value] : round) {
      const SubOpId id(value);
      result.global.push_back(id);
      result.per_device[static_cast<std::size_t>(plan.sub_op(id).device)].push_back(id);
    }
    result.round_ends.push_back(result.global.size());
    // Successors become ready for the next round; a gradient's node passes its readers on at once.
    for (const auto& [position, value] : round)
      for (SubOpId to : graph.edges[SubOpId(value).index()]) arrive(to);
    while (!passed.empty()) {
      const SubOpId node = passed.back();
      passed.pop_back();
      for (SubOpId to : graph.edges[node.index()]) arrive(to);
    }
  }
  if (result.global.size() != live)
    return fail(fmt::format("deadlock: {} of {} sub-ops wait, in a cycle through a gradient with resident pieces "
                            "(its readers run after all its producers)",
                            live - result.global.size(), live),
                "a sub-op producing such a gradient must not depend on one reading it");
  return result;
}

}  // namespace loom::plan
