// Rhino's coarsening of the strategy graph (strategy_graph.h, "Coarsening"): identical layers merged,
// forced chains followed.
#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <map>

#include "loom/policy/stages.h"
#include "strategy_facts.h"

namespace loom::search::detail {
namespace {

// A layer's structure: per op in program order its type, annotation, attributes' count, shapes and where
// each input comes from (an earlier op of the layer and its output, or outside: its shape and role).
std::string layer_signature(const ir::Graph& graph, const std::vector<ir::OpId>& ops,
                            const std::vector<ir::OpId>& producer) {
  std::map<std::uint32_t, std::size_t> position;  // OpId value -> index in the layer
  for (std::size_t k = 0; k < ops.size(); ++k) position[ops[k].value] = k;
  std::string text;
  for (const ir::OpId id : ops) {
    const ir::Op& op = graph.op(id);
    text += fmt::format("{}[{}]{}(", op.type, op.annotation, op.attrs.size());
    for (const ir::TensorId t : op.inputs) {
      const ir::FullTensor& tensor = graph.tensor(t);
      const ir::OpId p = producer[t.index()];
      const auto inside = p.valid() ? position.find(p.value) : position.end();
      if (inside != position.end()) {
        std::size_t j = 0;
        while (graph.op(p).outputs[j] != t) ++j;
        text += fmt::format("#{}.{},", inside->second, j);
      } else {
        text += fmt::format("{}{}{},", ir::name(tensor.role), tensor.shape.to_string(), ir::name(tensor.dtype));
      }
    }
    text += ")->";
    for (const ir::TensorId t : op.outputs)
      text += fmt::format("{}{},", graph.tensor(t).shape.to_string(), ir::name(graph.tensor(t).dtype));
    text += ";";
  }
  return text;
}

// By OpId, the op whose variables each forward op shares: the same position in the first layer of the
// same structure, or itself.
std::vector<ir::OpId> layer_representatives(const ir::Graph& graph, const std::vector<OpFacts>& facts) {
  std::vector<ir::OpId> rep(graph.ops.size());
  std::map<std::string, std::vector<ir::OpId>> layers;  // layer name -> forward ops, program order
  std::vector<std::string> order;
  for (const ir::Op& op : graph.ops) {
    if (op.pass != ir::Pass::forward) continue;
    rep[op.id.index()] = op.id;
    const std::string_view layer = policy::layer_of(op.name);
    if (layer.empty()) continue;
    auto [it, added] = layers.try_emplace(std::string(layer));
    if (added) order.push_back(it->first);
    it->second.push_back(op.id);
  }
  const std::vector<ir::OpId> producer = ir::producers(graph);
  std::map<std::string, const std::vector<ir::OpId>*> first_of_kind;
  for (const std::string& name : order) {
    const std::vector<ir::OpId>& ops = layers[name];
    const auto [it, added] = first_of_kind.try_emplace(layer_signature(graph, ops, producer), &ops);
    if (added) continue;
    const std::vector<ir::OpId>& first = *it->second;
    for (std::size_t k = 0; k < ops.size(); ++k)
      if (facts[ops[k].index()].candidates == facts[first[k].index()].candidates) rep[ops[k].index()] = first[k];
  }
  return rep;
}

// The single forward producer of an elementwise or data-movement op's only activation input (its other
// inputs are parameters, graph inputs or buffers); invalid when the op is not such a link of a chain.
ir::OpId chain_producer(const ir::Graph& graph, const ir::OpCatalog& catalog, const ir::Op& op,
                        const std::vector<ir::OpId>& producer) {
  const ir::OpDef* def = catalog.find(op.type);
  if (def == nullptr || (def->op_class != ir::OpClass::elementwise && def->op_class != ir::OpClass::data_movement))
    return {};
  ir::OpId found;
  for (const ir::TensorId t : op.inputs) {
    const ir::OpId p = producer[t.index()];
    if (!p.valid()) continue;
    if (found.valid() || graph.op(p).pass != ir::Pass::forward) return {};
    found = p;
  }
  return found;
}

}  // namespace

Expected<Coarsening> coarsen(const ir::Graph& graph, const ir::OpCatalog& catalog, const std::vector<OpFacts>& facts,
                             OpPricer& pricer, bool merge_layers, bool follow_chains) {
  std::vector<ir::OpId> rep(graph.ops.size());
  if (merge_layers) {
    rep = layer_representatives(graph, facts);
  } else {
    for (const ir::Op& op : graph.ops)
      if (op.pass == ir::Pass::forward) rep[op.id.index()] = op.id;
  }
  const std::vector<ir::OpId> producer = ir::producers(graph);
  std::vector<std::vector<const OpEdge*>> edges_into(graph.ops.size());  // by consumer
  for (const OpEdge& e : pricer.edges()) edges_into[e.to.index()].push_back(&e);

  Coarsening c;
  c.node_of.assign(graph.ops.size(), -1);
  c.candidate_of.resize(graph.ops.size());
  for (const ir::Op& op : graph.ops) {
    if (op.pass != ir::Pass::forward || rep[op.id.index()] != op.id) continue;
    ++c.after_layers;
    const OpFacts& own = facts[op.id.index()];
    const ir::OpId from = follow_chains ? chain_producer(graph, catalog, op, producer) : ir::OpId{};
    if (!from.valid()) {
      c.node_of[op.id.index()] = static_cast<int>(c.roots.size());
      c.roots.push_back(op.id);
      for (std::size_t s = 0; s < own.candidates.size(); ++s)
        if (own.facts[s].valid) c.candidate_of[op.id.index()].push_back(static_cast<int>(s));
      continue;
    }
    // Forced: per strategy of the producer's node, this op's cheapest candidate after the producer's. The
    // candidates are tried by their own cost (then index): once that alone reaches the best total found,
    // no later one can beat it (moves cost >= 0), so the pairs past it are never priced.
    const std::vector<double>& own_seconds = pricer.node_seconds()[op.id.index()];
    std::vector<std::size_t> order;
    for (std::size_t s = 0; s < own.candidates.size(); ++s)
      if (own.facts[s].valid) order.push_back(s);
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return own_seconds[a] < own_seconds[b]; });
    const ir::OpId from_rep = rep[from.index()];
    c.node_of[op.id.index()] = c.node_of[from_rep.index()];
    for (const int p : c.candidate_of[from_rep.index()]) {
      int best = -1;
      double best_seconds = std::numeric_limits<double>::infinity();
      for (const std::size_t s : order) {
        if (own_seconds[s] >= best_seconds) break;
        double seconds = own_seconds[s];
        for (const OpEdge* e : edges_into[op.id.index()]) {
          if (e->from != from) continue;
          LOOM_ASSIGN_OR_RETURN(const double move, pricer.edge_seconds(*e, static_cast<std::size_t>(p), s));
          seconds += move;
        }
        if (seconds < best_seconds) {
          best_seconds = seconds;
          best = static_cast<int>(s);
        }
      }
      c.candidate_of[op.id.index()].push_back(best);
    }
  }
  for (const ir::Op& op : graph.ops) {
    if (op.pass != ir::Pass::forward || rep[op.id.index()] == op.id) continue;
    c.node_of[op.id.index()] = c.node_of[rep[op.id.index()].index()];
    c.candidate_of[op.id.index()] = c.candidate_of[rep[op.id.index()].index()];
  }
  return c;
}

}  // namespace loom::search::detail
