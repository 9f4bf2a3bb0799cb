#include "loom/policy/stages.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>

#include <fmt/format.h>

#include "loom/ir/graph_stats.h"
#include "loom/ops/registry.h"
#include "loom/plan/batch.h"

namespace loom::policy {

Expected<std::vector<int>> pipeline_stages(const plan::Plan& plan, int stages, const ir::OpCatalog& catalog) {
  if (stages < 1) return fail(fmt::format("pipeline of {} stages: the degree must be at least 1", stages));
  const ir::Graph& graph = *plan.graph;
  std::vector<double> flops(graph.ops.size(), 1.0);
  if (stages > 1) {
    LOOM_ASSIGN_OR_RETURN(flops, ir::op_flops(graph, catalog));
  }
  // Training cost of each forward op: its FLOPs plus its backward op's.
  std::vector<double> cost(graph.ops.size(), 0.0);
  for (const ir::Op& op : graph.ops) {
    const double f = std::max(flops[op.id.index()], 0.0);
    if (op.pass == ir::Pass::forward) cost[op.id.index()] += f;
    else if (op.is_mirror()) cost[op.mirror_of.index()] += f;
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
  const std::vector<std::optional<std::string>> batch = plan::batch_identifiers(plan);
  std::vector<int> batched(static_cast<std::size_t>(stages), 0);
  for (const ir::Op& op : graph.ops)
    if (stage[op.id.index()] >= 0 && batch[op.id.index()]) ++batched[static_cast<std::size_t>(stage[op.id.index()])];
  for (int s = 0; s < stages; ++s)
    if (batched[static_cast<std::size_t>(s)] == 0)
      return fail(fmt::format("pipeline of {} stages: stage {} of '{}' gets no op that sees the batch", stages, s,
                              graph.name),
                  "use fewer stages or a deeper model");
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
  // Each forward op's layer ordinal: that of the last layer seen so far (non-decreasing, so a name that
  // comes back later never moves an op to an earlier stage).
  std::vector<int> ordinal = layer_ordinals(graph);
  int current = 0, count = 0;
  for (const ir::Op& op : graph.ops) {
    if (op.pass != ir::Pass::forward) continue;
    int& o = ordinal[op.id.index()];
    count = std::max(count, o + 1);
    current = std::max(current, o);
    o = current;
  }
  if (count == 0)
    return fail(fmt::format("'{}' has no numbered layers (op names like 'layers.3.attn') to cut into {} stages",
                            graph.name, stages),
                "use a model built of numbered layers, or a pipeline without interleaving");
  if (count % stages != 0)
    return fail(fmt::format("{} layers of '{}' are not divisible into {} stages of whole layers", count, graph.name,
                            stages),
                "choose pipeline stages x chunks that divide the layers (Megatron-LM requires it too), or set --layers");
  std::vector<int> stage(graph.ops.size(), -1);
  for (const ir::Op& op : graph.ops)
    if (op.pass == ir::Pass::forward) stage[op.id.index()] = ordinal[op.id.index()] / (count / stages);
  return stage;
}

}  // namespace loom::policy
