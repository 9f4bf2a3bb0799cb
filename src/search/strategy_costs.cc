// Every op and op pair priced under every pair of candidates (strategy_facts.h, strategy_graph.h "Costs").
#include <fmt/format.h>

#include <map>
#include <tuple>

#include "strategy_facts.h"

namespace loom::search::detail {
namespace {

// Transition times by (shape, dtype, from, to), the layouts in canonical form (comm/layout.h): every layer
// moves the same tensors the same ways, and equal placements move nothing.
class Transitions {
 public:
  Transitions(const cluster::Cluster& cluster, const comm::CommCostModel& comm, const comm::SearchOptions& options)
      : cluster_(cluster), comm_(comm), options_(options) {}

  // Seconds to turn `from` into `to` (0 when either is absent: nothing moves).
  Expected<double> seconds(const ir::FullTensor& tensor, const MaybeLayout& from, const MaybeLayout& to) {
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

 private:
  const cluster::Cluster& cluster_;
  const comm::CommCostModel& comm_;
  const comm::SearchOptions& options_;
  std::map<std::tuple<std::vector<std::int64_t>, ir::DType, comm::Layout, comm::Layout>, double> memo_;
};

// Where a consumer's input comes from: output `index` of a forward op, or (a parameter read again) the
// layout the parameter's first reader keeps it in, input `index` of that reader.
struct Source {
  ir::OpId op;
  std::size_t index = 0;
  bool kept_parameter = false;

  const MaybeLayout& layout(const StrategyFacts& f) const {
    return kept_parameter ? f.kept_parameters[index] : f.outputs[index];
  }
  const MaybeLayout& gradient(const StrategyFacts& f) const {
    return kept_parameter ? f.kept_parameters[index] : f.output_grads[index];
  }
};

std::optional<Source> source_of(const plan::Plan& fresh, const std::vector<ir::OpId>& producer,
                                const std::vector<ir::OpId>& first_reader, ir::TensorId t, ir::OpId reader) {
  const ir::Graph& graph = *fresh.graph;
  if (const ir::OpId p = producer[t.index()]; p.valid() && graph.op(p).pass == ir::Pass::forward) {
    const ir::Op& op = graph.op(p);
    for (std::size_t j = 0; j < op.outputs.size(); ++j)
      if (op.outputs[j] == t) return Source{p, j, false};
  }
  if (const ir::OpId f = first_reader[t.index()]; f.valid() && f != reader) {
    const ir::Op& op = graph.op(f);
    for (std::size_t i = 0; i < op.inputs.size(); ++i)
      if (op.inputs[i] == t) return Source{f, i, true};
  }
  return std::nullopt;
}

}  // namespace

Expected<OpCosts> price_ops(const plan::Plan& fresh, const std::vector<OpFacts>& facts, const cluster::Cluster& cluster,
                            const comm::CommCostModel& comm, const comm::SearchOptions& options) {
  const ir::Graph& graph = *fresh.graph;
  Transitions moves(cluster, comm, options);
  const std::vector<ir::OpId> producer = ir::producers(graph);
  const std::vector<ir::OpId> first_reader = first_parameter_readers(fresh);
  OpCosts costs;
  costs.node_seconds.resize(graph.ops.size());
  for (const ir::Op& op : graph.ops) {
    if (op.pass != ir::Pass::forward) continue;
    const OpFacts& of = facts[op.id.index()];
    auto& node = costs.node_seconds[op.id.index()];
    node.assign(of.candidates.size(), 0.0);
    for (std::size_t s = 0; s < of.candidates.size(); ++s) {
      const StrategyFacts& f = of.facts[s];
      if (!f.valid) continue;
      node[s] = f.compute_seconds;
      // The parameters it places: gradients to where the optimizer step keeps them, weights to where it reads.
      for (std::size_t i = 0; i < op.inputs.size(); ++i) {
        if (!f.kept_parameters[i]) continue;
        const ir::FullTensor& p = graph.tensor(op.inputs[i]);
        LOOM_ASSIGN_OR_RETURN(const double sync, moves.seconds(p, f.input_grads[i], f.kept_parameters[i]));
        LOOM_ASSIGN_OR_RETURN(const double read, moves.seconds(p, f.kept_parameters[i], f.inputs[i]));
        node[s] += sync + read;
      }
    }
    for (std::size_t i = 0; i < op.inputs.size(); ++i) {
      if (fresh.layouts[op.id.index()].shape_only(i)) continue;
      const std::optional<Source> source = source_of(fresh, producer, first_reader, op.inputs[i], op.id);
      if (!source) continue;
      const ir::FullTensor& t = graph.tensor(op.inputs[i]);
      const OpFacts& from = facts[source->op.index()];
      OpEdge edge{source->op, op.id, std::vector<double>(from.candidates.size() * of.candidates.size(), 0.0)};
      for (std::size_t a = 0; a < from.candidates.size(); ++a) {
        if (!from.facts[a].valid) continue;
        for (std::size_t b = 0; b < of.candidates.size(); ++b) {
          const StrategyFacts& c = of.facts[b];
          if (!c.valid) continue;
          LOOM_ASSIGN_OR_RETURN(const double forward, moves.seconds(t, source->layout(from.facts[a]), c.inputs[i]));
          LOOM_ASSIGN_OR_RETURN(const double backward,
                                moves.seconds(t, c.input_grads[i], source->gradient(from.facts[a])));
          edge.seconds[a * of.candidates.size() + b] = forward + backward;
        }
      }
      costs.edges.push_back(std::move(edge));
    }
  }
  return costs;
}

}  // namespace loom::search::detail
