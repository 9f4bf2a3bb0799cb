#include "loom/plan/validate.h"

#include <algorithm>
#include <map>
#include <queue>

#include <fmt/format.h>

#include "loom/core/strings.h"
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

Expected<ExecutionOrder> complete_order(const Plan& plan, int num_devices) {
  LOOM_ASSIGN_OR_RETURN(const std::vector<std::vector<SubOpId>> edges, validated_edges(plan, num_devices));
  std::vector<int> indegree(plan.sub_ops.size(), 0);
  for (const auto& out : edges)
    for (SubOpId to : out) ++indegree[to.index()];
  // Ready sub-ops by (program position of their op, id): deterministic and close to program order.
  using Key = std::pair<std::uint32_t, std::uint32_t>;
  std::priority_queue<Key, std::vector<Key>, std::greater<>> ready;
  for (const SubOp& s : plan.sub_ops)
    if (s.live && indegree[s.id.index()] == 0) ready.emplace(s.op.value, s.id.value);
  ExecutionOrder result;
  result.per_device.resize(static_cast<std::size_t>(num_devices));
  while (!ready.empty()) {
    const SubOpId id(ready.top().second);
    ready.pop();
    result.global.push_back(id);
    result.per_device[static_cast<std::size_t>(plan.sub_op(id).device)].push_back(id);
    for (SubOpId to : edges[id.index()])
      if (--indegree[to.index()] == 0) ready.emplace(plan.sub_op(to).op.value, to.value);
  }
  return result;
}

}  // namespace loom::plan
