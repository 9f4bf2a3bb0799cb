#include "loom/policy/recompute_policy.h"

#include <set>

#include <fmt/format.h>

#include "loom/ir/op_def.h"
#include "loom/policy/attention_core.h"
#include "loom/ops/registry.h"
#include "loom/plan/recompute.h"
#include "loom/policy/stages.h"

namespace loom::policy {
namespace {

bool memory_bound(ir::OpClass op_class) {
  switch (op_class) {
    case ir::OpClass::elementwise:
    case ir::OpClass::normalization:
    case ir::OpClass::data_movement:
    case ir::OpClass::reduction: return true;
    default: return false;
  }
}

// By OpId: whether a forward op's outputs are all read inside its own layer (by forward ops).
std::vector<char> stays_in_layer(const ir::Graph& graph) {
  std::vector<char> stays(graph.ops.size(), 1);
  std::vector<ir::OpId> producer(graph.tensors.size());
  for (const ir::Op& op : graph.ops)
    if (op.pass == ir::Pass::forward)
      for (ir::TensorId t : op.outputs) producer[t.index()] = op.id;
  if (graph.loss.valid() && producer[graph.loss.index()].valid()) stays[producer[graph.loss.index()].index()] = 0;
  for (const ir::Op& op : graph.ops) {
    if (op.pass != ir::Pass::forward) continue;
    for (ir::TensorId in : op.inputs) {
      const ir::OpId p = producer[in.index()];
      if (p.valid() && layer_of(graph.op(p).name) != layer_of(op.name)) stays[p.index()] = 0;
    }
  }
  return stays;
}

}  // namespace

std::string_view name(Recompute recompute) {
  switch (recompute) {
    case Recompute::none: return "none";
    case Recompute::selective: return "selective";
    case Recompute::full: return "full";
    case Recompute::memory_bound: return "memory-bound";
  }
  return "?";
}

Expected<Recompute> parse_recompute(std::string_view text) {
  for (Recompute r : {Recompute::none, Recompute::selective, Recompute::full, Recompute::memory_bound})
    if (name(r) == text) return r;
  return fail(fmt::format("unknown recomputation '{}'", text), "use none, selective, full or memory-bound");
}

Expected<void> apply_recompute(plan::Plan& plan, Recompute recompute, const ir::OpCatalog& catalog) {
  if (recompute == Recompute::none) return {};
  const ir::Graph& graph = *plan.graph;
  const std::vector<char> stays = stays_in_layer(graph);
  std::vector<char> in_core;
  std::set<std::string_view, std::less<>> layers_with_core;
  if (recompute == Recompute::selective) {
    in_core = attention_core_ops(graph, catalog);
    for (const ir::Op& op : graph.ops)
      if (in_core[op.id.index()]) layers_with_core.insert(layer_of(op.name));
  }
  std::vector<plan::SubOpId> chosen;
  bool any_layer = false;
  for (const ir::Op& op : graph.ops) {
    if (op.pass != ir::Pass::forward || layer_of(op.name).empty()) continue;
    any_layer = true;
    if (!stays[op.id.index()]) continue;
    if (recompute == Recompute::selective && layers_with_core.contains(layer_of(op.name))) {
      if (!in_core[op.id.index()]) continue;
    } else if (recompute != Recompute::full) {  // memory-bound, or selective in a layer without a core
      const ir::OpDef* def = catalog.find(op.type);
      if (def == nullptr || !memory_bound(def->op_class)) continue;
    }
    for (plan::SubOpId part : plan.parts[op.id.index()]) chosen.push_back(part);
  }
  if (!any_layer)
    return fail(fmt::format("recompute {}: model '{}' has no numbered layers to recompute", name(recompute), graph.name),
                "recompute applies to layered models (ops named like 'layers.3.mlp')");
  return plan::recompute(plan, chosen);
}

}  // namespace loom::policy
