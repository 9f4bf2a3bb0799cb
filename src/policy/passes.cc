#include "loom/policy/passes.h"

#include <set>
#include <string_view>

#include <fmt/format.h>

#include "loom/policy/stages.h"

namespace loom::policy {

int layer_passes(const ir::Graph& graph) {
  std::vector<bool> parameter(graph.tensors.size(), false);
  for (ir::TensorId p : graph.parameters) parameter[p.index()] = true;
  ir::TensorId first;
  std::set<std::string_view> readers;
  for (const ir::Op& op : graph.ops) {
    const std::string_view layer = layer_of(op.name);
    if (op.pass != ir::Pass::forward || layer.empty()) continue;
    for (ir::TensorId t : op.inputs) {
      if (!parameter[t.index()]) continue;
      if (!first.valid()) first = t;
      if (t == first) readers.insert(layer);
    }
  }
  return std::max<int>(1, static_cast<int>(readers.size()));
}

Expected<ParallelConfig> three_f_one_b_config(const plan::Plan& plan, ParallelConfig config) {
  const ir::Graph& graph = *plan.graph;
  if (config.pp < 2)
    return fail(fmt::format("schedule 3f1b pipelines the passes of '{}' over pp stages, but pp is {}", graph.name,
                            config.pp),
                "set --pp 2 or more");
  if (config.virtual_stages != 1)
    return fail(fmt::format("schedule 3f1b places one chunk per pass itself; --interleave {} was given",
                            config.virtual_stages),
                "leave --interleave out");
  const int passes = layer_passes(graph);
  if (passes < 2)
    return fail(fmt::format("schedule 3f1b needs a model that runs its layers several times with shared weights "
                            "(AlphaFold2's recycles); '{}' runs each layer once",
                            graph.name),
                "use --schedule 1f1b (or another template) for this model");
  // Only the last pass may have a backward: its layers are the last 1 / passes of the numbered layers.
  const std::vector<int> ordinal = layer_ordinals(graph);
  int layers = 0;
  for (int o : ordinal) layers = std::max(layers, o + 1);
  for (const ir::Op& op : graph.ops) {
    const int o = ordinal[op.id.index()];
    if (o < 0 || o >= layers - layers / passes) continue;
    for (plan::SubOpId id : plan.parts[op.id.index()])
      if (plan.sub_op(id).mirror.valid())
        return fail(fmt::format("schedule 3f1b runs the recycled passes forward only, but '{}' (pass {} of {}) has a "
                                "backward",
                                op.name, o / (layers / passes) + 1, passes),
                    "detach the recycled passes' outputs (AlphaFold2's recycle_detach), or use --schedule 1f1b");
  }
  config.virtual_stages = passes;
  return config;
}

}  // namespace loom::policy
