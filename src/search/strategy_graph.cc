// The strategy graph assembled from per-op facts, costs and the coarsening (strategy_graph.h).
#include "loom/search/strategy_graph.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "strategy_facts.h"

namespace loom::search {
namespace {

std::int64_t nanoseconds(double seconds) { return std::llround(seconds * 1e9); }

}  // namespace

Expected<StrategyGraph> build_strategy_graph(const ir::Graph& graph, const ir::OpCatalog& catalog,
                                             const cluster::Cluster& cluster, const comm::CommCostModel& comm,
                                             const DeviceMesh& mesh, const StrategyGraphOptions& options,
                                             const cost::ProfileDb* profile) {
  LOOM_RETURN_IF_ERROR(check_mesh(mesh));
  if (mesh.size() > cluster.device_count())
    return fail(fmt::format("device mesh {} needs {} devices, but cluster '{}' has {}", to_string(mesh), mesh.size(),
                            cluster.name, cluster.device_count()),
                "use a smaller mesh or a larger cluster");
  LOOM_ASSIGN_OR_RETURN(const plan::Plan fresh, plan::make_plan(graph, catalog));
  LOOM_ASSIGN_OR_RETURN(const std::vector<detail::OpFacts> facts,
                        detail::gather_facts(fresh, catalog, mesh, cluster.gpu, profile));
  detail::OpPricer pricer(fresh, facts, cluster, comm, options.search);
  LOOM_RETURN_IF_ERROR(pricer.price_ops());
  LOOM_ASSIGN_OR_RETURN(const detail::Coarsening coarse,
                        detail::coarsen(graph, catalog, facts, pricer, options.merge_layers, options.follow_chains));

  StrategyGraph out;
  out.mesh = mesh;
  out.problem.name = fmt::format("{} on mesh {}", graph.name, to_string(mesh));
  out.problem.usage_limit = options.usage_limit;
  out.node_of_op = coarse.node_of;
  out.op_strategies.resize(graph.ops.size());
  const std::size_t node_count = coarse.roots.size();
  std::vector<std::vector<double>> node_seconds(node_count);
  for (std::size_t g = 0; g < node_count; ++g) {
    const ir::Op& root = graph.op(coarse.roots[g]);
    StrategyNode node{root.name, {}, {}};
    for (const int s : coarse.candidate_of[root.id.index()])
      node.strategies.push_back(facts[root.id.index()].candidates[static_cast<std::size_t>(s)]);
    node_seconds[g].assign(node.strategies.size(), 0.0);
    out.nodes.push_back(std::move(node));
    ShardingNode problem_node;
    problem_node.name = root.name;
    problem_node.start = std::numeric_limits<std::int64_t>::max();
    problem_node.usages.assign(out.nodes.back().strategies.size(), 0);
    out.problem.nodes.push_back(std::move(problem_node));
  }

  // Every forward op's cost and usage into its node, at its place in the forward program order.
  std::int64_t position = 0;
  for (const ir::Op& op : graph.ops) {
    if (op.pass != ir::Pass::forward) continue;
    const int g = coarse.node_of[op.id.index()];
    const std::vector<int>& candidate = coarse.candidate_of[op.id.index()];
    ShardingNode& node = out.problem.nodes[static_cast<std::size_t>(g)];
    out.nodes[static_cast<std::size_t>(g)].ops.push_back(op.id);
    node.start = std::min(node.start, position++);
    for (std::size_t s = 0; s < candidate.size(); ++s) {
      if (candidate[s] < 0)
        return fail(fmt::format("op '{}' has no strategy its producer's layout allows", op.name));
      const auto c = static_cast<std::size_t>(candidate[s]);
      const detail::StrategyFacts& f = facts[op.id.index()].facts[c];
      node_seconds[static_cast<std::size_t>(g)][s] += pricer.node_seconds()[op.id.index()][c];
      node.usages[s] += f.state_bytes + f.activation_bytes;
      out.op_strategies[op.id.index()].push_back(facts[op.id.index()].candidates[c]);
    }
  }
  for (ShardingNode& node : out.problem.nodes) node.end = position;

  // Op pairs into node pairs; a pair inside one node adds to its own costs.
  std::map<std::pair<int, int>, std::vector<double>> edge_seconds;
  for (const detail::OpEdge& e : pricer.edges()) {
    const int a = coarse.node_of[e.from.index()], b = coarse.node_of[e.to.index()];
    const std::vector<int>& from = coarse.candidate_of[e.from.index()];
    const std::vector<int>& to = coarse.candidate_of[e.to.index()];
    const auto cell = [&](std::size_t s, std::size_t t) {
      return pricer.edge_seconds(e, static_cast<std::size_t>(from[s]), static_cast<std::size_t>(to[t]));
    };
    if (a == b) {
      for (std::size_t s = 0; s < from.size(); ++s) {
        LOOM_ASSIGN_OR_RETURN(const double seconds, cell(s, s));
        node_seconds[static_cast<std::size_t>(a)][s] += seconds;
      }
      continue;
    }
    auto& table = edge_seconds[{a, b}];
    table.resize(from.size() * to.size(), 0.0);
    for (std::size_t s = 0; s < from.size(); ++s)
      for (std::size_t t = 0; t < to.size(); ++t) {
        LOOM_ASSIGN_OR_RETURN(const double seconds, cell(s, t));
        table[s * to.size() + t] += seconds;
      }
  }
  for (std::size_t g = 0; g < node_count; ++g)
    for (const double seconds : node_seconds[g]) out.problem.nodes[g].costs.push_back(nanoseconds(seconds));
  for (const auto& [ends, table] : edge_seconds) {
    ShardingEdge edge{ends.first, ends.second, {}};
    for (const double seconds : table) edge.costs.push_back(nanoseconds(seconds));
    out.problem.edges.push_back(std::move(edge));
  }
  out.stats = {.forward_ops = static_cast<int>(position),
               .after_layers = coarse.after_layers,
               .nodes = static_cast<int>(node_count),
               .edges = static_cast<int>(out.problem.edges.size())};
  LOOM_RETURN_IF_ERROR(check_problem(out.problem));
  return out;
}

Expected<std::vector<OpStrategy>> op_strategies(const StrategyGraph& graph, const ShardingChoice& choice) {
  if (choice.strategies.size() != graph.nodes.size())
    return fail(fmt::format("the choice has {} strategies for {} nodes", choice.strategies.size(), graph.nodes.size()));
  std::vector<OpStrategy> out(graph.node_of_op.size(), replicated(graph.mesh));
  for (std::size_t g = 0; g < graph.nodes.size(); ++g) {
    const int s = choice.strategies[g];
    if (s < 0 || static_cast<std::size_t>(s) >= graph.nodes[g].strategies.size())
      return fail(fmt::format("node {} ('{}'): strategy {} is out of range (it has {})", g, graph.nodes[g].name, s,
                              graph.nodes[g].strategies.size()));
    for (const ir::OpId op : graph.nodes[g].ops)
      out[op.index()] = graph.op_strategies[op.index()][static_cast<std::size_t>(s)];
  }
  return out;
}

Expected<ShardingChoice> choice_of(const StrategyGraph& graph, std::span<const OpStrategy> per_op) {
  ShardingChoice choice;
  for (std::size_t g = 0; g < graph.nodes.size(); ++g) {
    const ir::OpId root = graph.nodes[g].ops.front();
    if (root.index() >= per_op.size())
      return fail(fmt::format("{} op strategies, but node {} is op #{}", per_op.size(), g, root.index()));
    const OpStrategy& wanted = per_op[root.index()];
    const auto& options = graph.nodes[g].strategies;
    const auto it = std::find(options.begin(), options.end(), wanted);
    if (it == options.end())
      return fail(fmt::format("node {} ('{}') has no strategy {}", g, graph.nodes[g].name, to_string(wanted)),
                  "choose one of the node's strategies (StrategyNode::strategies)");
    choice.strategies.push_back(static_cast<int>(it - options.begin()));
  }
  return choice;
}

Expected<plan::Plan> apply_choice(const StrategyGraph& strategies, const ShardingChoice& choice, const ir::Graph& graph,
                                  const ir::OpCatalog& catalog) {
  LOOM_ASSIGN_OR_RETURN(const std::vector<OpStrategy> per_op, op_strategies(strategies, choice));
  return apply_sharding(graph, catalog, strategies.mesh, per_op);
}

}  // namespace loom::search
