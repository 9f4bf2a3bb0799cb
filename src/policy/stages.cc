#include "loom/policy/stages.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <unordered_map>

#include <fmt/format.h>

#include "loom/ir/graph_stats.h"
#include "loom/ops/registry.h"
#include "loom/plan/batch.h"

namespace loom::policy {

namespace {

// Errors when a stage gets no op that sees the batch: its pipeline would have nothing to micro-batch.
Expected<void> check_batched(const plan::Plan& plan, const std::vector<int>& stage, int stages) {
  const std::vector<std::optional<std::string>> batch = plan::batch_identifiers(plan);
  std::vector<int> batched(static_cast<std::size_t>(stages), 0);
  for (const ir::Op& op : plan.graph->ops)
    if (stage[op.id.index()] >= 0 && batch[op.id.index()]) ++batched[static_cast<std::size_t>(stage[op.id.index()])];
  for (int s = 0; s < stages; ++s)
    if (batched[static_cast<std::size_t>(s)] == 0)
      return fail(fmt::format("pipeline of {} stages: stage {} of '{}' gets no op that sees the batch", stages, s,
                              plan.graph->name),
                  "use fewer stages or a deeper model");
  return {};
}

// By OpId: the layer ordinal each forward op is staged with, that of the last layer seen so far (0 before
// the first), so it never decreases along program order and a name that comes back later never moves an
// op to an earlier stage; -1 for the other passes. `count`: the number of layers.
std::vector<int> running_layer_ordinals(const ir::Graph& graph, int& count) {
  std::vector<int> ordinal = layer_ordinals(graph);
  int current = 0;
  count = 0;
  for (const ir::Op& op : graph.ops) {
    if (op.pass != ir::Pass::forward) continue;
    int& o = ordinal[op.id.index()];
    count = std::max(count, o + 1);
    current = std::max(current, o);
    o = current;
  }
  return ordinal;
}

Error no_layers(const ir::Graph& graph, int stages) {
  return Error{fmt::format("'{}' has no numbered layers (op names like 'layers.3.attn') to cut into {} stages",
                           graph.name, stages),
               "use a model built of numbered layers, or a pipeline without interleaving"};
}

}  // namespace

Expected<std::vector<double>> training_flops(const ir::Graph& graph, const ir::OpCatalog& catalog) {
  LOOM_ASSIGN_OR_RETURN(const std::vector<double> flops, ir::op_flops(graph, catalog));
  std::vector<double> cost(graph.ops.size(), 0.0);
  for (const ir::Op& op : graph.ops) {
    const double f = std::max(flops[op.id.index()], 0.0);
    if (op.pass == ir::Pass::forward) cost[op.id.index()] += f;
    else if (op.is_mirror()) cost[op.mirror_of.index()] += f;
  }
  return cost;
}

Expected<std::vector<int>> pipeline_stages(const plan::Plan& plan, int stages, const ir::OpCatalog& catalog) {
  if (stages < 1) return fail(fmt::format("pipeline of {} stages: the degree must be at least 1", stages));
  const ir::Graph& graph = *plan.graph;
  // Training cost of each forward op: its FLOPs plus its backward op's.
  std::vector<double> cost(graph.ops.size(), 0.0);
  if (stages > 1) {
    LOOM_ASSIGN_OR_RETURN(cost, training_flops(graph, catalog));
  }
  double total = 0;
  for (const ir::Op& op : graph.ops)
    if (op.pass == ir::Pass::forward) total += cost[op.id.index()];
  const bool by_count = total <= 0;
  if (by_count)
    for (const ir::Op& op : graph.ops)
      if (op.pass == ir::Pass::forward) cost[op.id.index()] = 1, total += 1;

  // Each op goes to the stage its cost midpoint falls in, so the cut lands where the running total
  // crosses s/stages of the whole.
  std::vector<int> stage(graph.ops.size(), -1);
  double before = 0;
  for (const ir::Op& op : graph.ops) {
    if (op.pass != ir::Pass::forward) continue;
    const double c = cost[op.id.index()];
    const double at = stages * (before + c / 2) / total;
    stage[op.id.index()] = std::clamp(static_cast<int>(std::floor(at)), 0, stages - 1);
    before += c;
  }
  LOOM_RETURN_IF_ERROR(check_batched(plan, stage, stages));
  return stage;
}

std::string_view layer_of(std::string_view op_name) {
  std::size_t end = std::string_view::npos;  // end of the last numeric component seen
  std::size_t start = 0;
  while (start <= op_name.size()) {
    const std::size_t dot = std::min(op_name.find('.', start), op_name.size());
    const std::string_view part = op_name.substr(start, dot - start);
    if (!part.empty() && std::ranges::all_of(part, [](char c) { return c >= '0' && c <= '9'; })) end = dot;
    start = dot + 1;
  }
  return end == std::string_view::npos ? std::string_view{} : op_name.substr(0, end);
}

std::vector<int> layer_ordinals(const ir::Graph& graph) {
  std::vector<int> ordinal(graph.ops.size(), -1);
  std::unordered_map<std::string_view, int> layers;
  for (const ir::Op& op : graph.ops) {
    const std::string_view layer = layer_of(op.name);
    if (op.pass != ir::Pass::forward || layer.empty()) continue;
    ordinal[op.id.index()] = layers.try_emplace(layer, static_cast<int>(layers.size())).first->second;
  }
  return ordinal;
}

Expected<std::vector<int>> layer_stages(const plan::Plan& plan, int stages) {
  if (stages < 1) return fail(fmt::format("pipeline of {} stages: the degree must be at least 1", stages));
  const ir::Graph& graph = *plan.graph;
  int count = 0;
  const std::vector<int> ordinal = running_layer_ordinals(graph, count);
  if (count == 0) return std::unexpected(no_layers(graph, stages));
  if (count % stages != 0)
    return fail(fmt::format("{} layers of '{}' are not divisible into {} stages of whole layers", count, graph.name,
                            stages),
                "choose pipeline stages x chunks that divide the layers (Megatron-LM requires it too), or set --layers");
  std::vector<int> stage(graph.ops.size(), -1);
  for (const ir::Op& op : graph.ops)
    if (op.pass == ir::Pass::forward) stage[op.id.index()] = ordinal[op.id.index()] / (count / stages);
  return stage;
}

Expected<std::vector<int>> balanced_partition(std::span<const double> costs, int parts) {
  if (parts < 1 || static_cast<std::size_t>(parts) > costs.size())
    return fail(fmt::format("{} items cannot be cut into {} non-empty contiguous groups", costs.size(), parts),
                "give between 1 and as many groups as items");
  const std::size_t n = costs.size(), p = static_cast<std::size_t>(parts);
  std::vector<double> prefix(n + 1, 0.0);
  for (std::size_t i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + std::max(costs[i], 0.0);
  const auto sum = [&](std::size_t from, std::size_t to) { return prefix[to] - prefix[from]; };
  // best[k][i]: the smallest largest sum of the first i items in k groups.
  std::vector<std::vector<double>> best(p + 1, std::vector<double>(n + 1, std::numeric_limits<double>::infinity()));
  best[0][0] = 0;
  for (std::size_t k = 1; k <= p; ++k)
    for (std::size_t i = k; i <= n; ++i)
      for (std::size_t j = k - 1; j < i; ++j) best[k][i] = std::min(best[k][i], std::max(best[k - 1][j], sum(j, i)));
  const double bound = best[p][n] * (1 + 1e-9);
  // fits[k][i]: items i .. n-1 split into k groups, none above the bound.
  std::vector<std::vector<char>> fits(p + 1, std::vector<char>(n + 1, 0));
  fits[0][n] = 1;
  for (std::size_t k = 1; k <= p; ++k)
    for (std::size_t i = 0; i + k <= n; ++i)
      for (std::size_t e = i + 1; e + k <= n + 1 && !fits[k][i]; ++e) fits[k][i] = sum(i, e) <= bound && fits[k - 1][e];
  // Each group as small as the rest still allows: the lexicographically smallest sizes. The optimum's
  // own partition passes every test, so a group end always exists.
  std::vector<int> sizes;
  for (std::size_t i = 0, k = p; k > 0; --k) {
    std::size_t e = i + 1;
    while (!(sum(i, e) <= bound && fits[k - 1][e])) ++e;
    assert(e <= n);
    sizes.push_back(static_cast<int>(e - i));
    i = e;
  }
  return sizes;
}

std::vector<double> layer_costs(const ir::Graph& graph, std::span<const double> op_cost) {
  int count = 0;
  const std::vector<int> ordinal = running_layer_ordinals(graph, count);
  std::vector<double> cost(static_cast<std::size_t>(count), 0.0);
  if (count == 0) return cost;
  for (const ir::Op& op : graph.ops)
    if (op.pass == ir::Pass::forward && op.id.index() < op_cost.size())
      cost[static_cast<std::size_t>(ordinal[op.id.index()])] += op_cost[op.id.index()];
  return cost;
}

bool uniform_layers(const ir::Graph& graph, std::span<const double> op_cost) {
  const std::vector<int> own = layer_ordinals(graph);
  std::vector<double> inside(graph.ops.size(), 0.0);
  for (const ir::Op& op : graph.ops)
    if (own[op.id.index()] >= 0 && op.id.index() < op_cost.size()) inside[op.id.index()] = op_cost[op.id.index()];
  const std::vector<double> cost = layer_costs(graph, inside);
  if (cost.empty()) return false;
  const auto [low, high] = std::ranges::minmax(cost);
  return high - low <= 1e-9 * std::abs(high);
}

Expected<std::vector<int>> balanced_layer_stages(const plan::Plan& plan, int stages, std::span<const double> op_cost) {
  if (stages < 1) return fail(fmt::format("pipeline of {} stages: the degree must be at least 1", stages));
  const ir::Graph& graph = *plan.graph;
  int count = 0;
  const std::vector<int> ordinal = running_layer_ordinals(graph, count);
  if (count == 0) return std::unexpected(no_layers(graph, stages));
  if (count < stages)
    return fail(fmt::format("{} layers of '{}' cannot fill {} stages of whole layers", count, graph.name, stages),
                "use fewer stages or a deeper model (set --layers)");
  LOOM_ASSIGN_OR_RETURN(const std::vector<int> sizes, balanced_partition(layer_costs(graph, op_cost), stages));
  std::vector<int> stage_of_layer;
  for (std::size_t s = 0; s < sizes.size(); ++s)
    stage_of_layer.insert(stage_of_layer.end(), static_cast<std::size_t>(sizes[s]), static_cast<int>(s));
  std::vector<int> stage(graph.ops.size(), -1);
  for (const ir::Op& op : graph.ops)
    if (op.pass == ir::Pass::forward)
      stage[op.id.index()] = stage_of_layer[static_cast<std::size_t>(ordinal[op.id.index()])];
  LOOM_RETURN_IF_ERROR(check_batched(plan, stage, stages));
  return stage;
}

}  // namespace loom::policy
