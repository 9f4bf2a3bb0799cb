// Ops and op pairs priced under their candidates (strategy_facts.h, strategy_graph.h "Costs").
#include <fmt/format.h>

#include "strategy_facts.h"

namespace loom::search::detail {
namespace {

// The layouts an edge's source gives its tensor and expects its gradient in.
const MaybeLayout& source_layout(const OpEdge& e, const StrategyFacts& f) {
  return e.kept_parameter ? f.kept_parameters[e.source_index] : f.outputs[e.source_index];
}
const MaybeLayout& source_gradient(const OpEdge& e, const StrategyFacts& f) {
  return e.kept_parameter ? f.kept_parameters[e.source_index] : f.output_grads[e.source_index];
}

// Where input `i` of `reader` comes from: a forward op's output, else a parameter's first other reader.
std::optional<OpEdge> edge_into(const plan::Plan& fresh, const std::vector<ir::OpId>& producer,
                                const std::vector<ir::OpId>& first_reader, const ir::Op& reader, std::size_t i) {
  const ir::Graph& graph = *fresh.graph;
  const ir::TensorId t = reader.inputs[i];
  if (const ir::OpId p = producer[t.index()]; p.valid() && graph.op(p).pass == ir::Pass::forward) {
    const ir::Op& op = graph.op(p);
    for (std::size_t j = 0; j < op.outputs.size(); ++j)
      if (op.outputs[j] == t) return OpEdge{p, reader.id, j, false, i};
  }
  if (const ir::OpId f = first_reader[t.index()]; f.valid() && f != reader.id) {
    const ir::Op& op = graph.op(f);
    for (std::size_t k = 0; k < op.inputs.size(); ++k)
      if (op.inputs[k] == t) return OpEdge{f, reader.id, k, true, i};
  }
  return std::nullopt;
}

}  // namespace

Expected<double> Transitions::seconds(const ir::FullTensor& tensor, const MaybeLayout& from, const MaybeLayout& to) {
  if (!from || !to || *from == *to) return 0.0;
  auto key = std::make_tuple(tensor.shape.dims, tensor.dtype, comm::canonical(*from), comm::canonical(*to));
  if (std::get<2>(key) == std::get<3>(key)) return 0.0;
  if (const auto it = memo_.find(key); it != memo_.end()) return it->second;
  const comm::TransitionRequest request{{tensor.shape, tensor.dtype}, *from, *to};
  LOOM_ASSIGN_OR_RETURN(const comm::TransitionPlan plan,
                        with_context(comm::search_transition(request, cluster_, comm_, options_),
                                     fmt::format("moving tensor '{}' from {} to {}", tensor.name,
                                                 comm::to_string(*from), comm::to_string(*to))));
  memo_.emplace(std::move(key), plan.time);
  return plan.time;
}

OpPricer::OpPricer(const plan::Plan& fresh, const std::vector<OpFacts>& facts, const cluster::Cluster& cluster,
                   const comm::CommCostModel& comm, const comm::SearchOptions& options)
    : fresh_(fresh), facts_(facts), moves_(cluster, comm, options) {
  const ir::Graph& graph = *fresh.graph;
  const std::vector<ir::OpId> producer = ir::producers(graph);
  const std::vector<ir::OpId> first_reader = first_parameter_readers(fresh);
  for (const ir::Op& op : graph.ops) {
    if (op.pass != ir::Pass::forward) continue;
    for (std::size_t i = 0; i < op.inputs.size(); ++i)
      if (!fresh.layouts[op.id.index()].shape_only(i))
        if (std::optional<OpEdge> e = edge_into(fresh, producer, first_reader, op, i)) edges_.push_back(*e);
  }
}

Expected<void> OpPricer::price_ops() {
  const ir::Graph& graph = *fresh_.graph;
  node_seconds_.assign(graph.ops.size(), {});
  for (const ir::Op& op : graph.ops) {
    if (op.pass != ir::Pass::forward) continue;
    const OpFacts& of = facts_[op.id.index()];
    auto& node = node_seconds_[op.id.index()];
    node.assign(of.candidates.size(), 0.0);
    for (std::size_t s = 0; s < of.candidates.size(); ++s) {
      const StrategyFacts& f = of.facts[s];
      if (!f.valid) continue;
      node[s] = f.compute_seconds;
      // The parameters it places: gradients to where the optimizer step keeps them, weights to where it reads.
      for (std::size_t i = 0; i < op.inputs.size(); ++i) {
        if (!f.kept_parameters[i]) continue;
        const ir::FullTensor& p = graph.tensor(op.inputs[i]);
        LOOM_ASSIGN_OR_RETURN(const double sync, moves_.seconds(p, f.input_grads[i], f.kept_parameters[i]));
        LOOM_ASSIGN_OR_RETURN(const double read, moves_.seconds(p, f.kept_parameters[i], f.inputs[i]));
        node[s] += sync + read;
      }
    }
  }
  return {};
}

Expected<double> OpPricer::edge_seconds(const OpEdge& e, std::size_t a, std::size_t b) {
  const StrategyFacts& from = facts_[e.from.index()].facts[a];
  const StrategyFacts& to = facts_[e.to.index()].facts[b];
  if (!from.valid || !to.valid) return 0.0;
  const ir::FullTensor& t = fresh_.graph->tensor(fresh_.graph->op(e.to).inputs[e.input]);
  LOOM_ASSIGN_OR_RETURN(const double forward, moves_.seconds(t, source_layout(e, from), to.inputs[e.input]));
  LOOM_ASSIGN_OR_RETURN(const double backward, moves_.seconds(t, to.input_grads[e.input], source_gradient(e, from)));
  return forward + backward;
}

}  // namespace loom::search::detail
