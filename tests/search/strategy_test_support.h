// Test support for the strategy graph (strategy_*_test.cc): small graphs, an exact solver for problems of
// small frontier (not the library's solver: a check of optimality), and a sharded plan through the job
// pipeline as `loom plan` runs a policy's.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <numeric>
#include <span>
#include <vector>

#include "loom/api/job.h"
#include "loom/cluster/presets.h"
#include "loom/comm/cost_model.h"
#include "loom/ir/autograd.h"
#include "loom/ir/graph_builder.h"
#include "loom/ops/registry.h"
#include "loom/search/sharding_problem.h"
#include "loom/search/strategy_graph.h"

namespace loom::search::testing {

// x[batch, hidden] -> fc1 (hidden -> ffn, bias) -> gelu -> fc2 (ffn -> classes, bias) -> cross entropy,
// with backward and AdamW.
inline ir::Graph mlp_graph(std::int64_t batch, std::int64_t hidden, std::int64_t ffn, std::int64_t classes,
                           ir::DType dtype) {
  ir::GraphBuilder b("mlp", ops::builtin_ops());
  const ir::TensorId x = b.input("x", ir::Shape{batch, hidden}, dtype);
  const ir::TensorId labels = b.input("labels", ir::Shape{batch}, ir::DType::i64);
  const ir::TensorId w1 = b.parameter("fc1.weight", ir::Shape{ffn, hidden}, dtype);
  const ir::TensorId b1 = b.parameter("fc1.bias", ir::Shape{ffn}, dtype);
  const ir::TensorId w2 = b.parameter("fc2.weight", ir::Shape{classes, ffn}, dtype);
  const ir::TensorId b2 = b.parameter("fc2.bias", ir::Shape{classes}, dtype);
  const ir::TensorId h = b.op("linear", "fc1", {x, w1, b1});
  const ir::TensorId a = b.op("gelu", "act", {h});
  const ir::TensorId logits = b.op("linear", "fc2", {a, w2, b2});
  b.set_loss(b.op("cross_entropy", "loss", {logits, labels}));
  auto forward = std::move(b).finish();
  EXPECT_TRUE(forward) << forward.error().to_string();
  auto training = forward ? ir::build_training_graph(*forward, ops::builtin_ops(), {}) : Expected<ir::Graph>(ir::Graph{});
  EXPECT_TRUE(training) << training.error().to_string();
  return training.value_or(ir::Graph{});
}

inline const cluster::Cluster& dgx_a100() {
  static const cluster::Cluster cluster = *cluster::make_cluster("dgx-a100");
  return cluster;
}

inline Expected<StrategyGraph> strategy_graph(const ir::Graph& graph, const DeviceMesh& mesh,
                                              StrategyGraphOptions options = {}) {
  const comm::AlphaBetaCostModel comm(dgx_a100());
  return build_strategy_graph(graph, ops::builtin_ops(), dgx_a100(), comm, mesh, options);
}

struct Optimum {
  ShardingChoice choice;
  std::int64_t cost = 0;
  std::size_t widest = 0;  // the most states the frontier held
};

// The exact optimum by dynamic programming over the nodes in index order: a state is the strategies of
// the decided nodes that still have an edge to an undecided one, so the work grows with the widest such
// frontier, not with the product of all strategy counts. Ignores the usage limit; forbidden costs are
// never chosen. Ties keep the lexicographically first assignment.
inline Optimum exact_optimum(const ShardingProblem& problem) {
  const std::size_t n = problem.nodes.size();
  std::vector<std::size_t> last_use(n);
  std::iota(last_use.begin(), last_use.end(), std::size_t{0});
  std::vector<std::vector<const ShardingEdge*>> back_edges(n);  // edges to an earlier node, at the later one
  for (const ShardingEdge& e : problem.edges) {
    const auto a = static_cast<std::size_t>(e.from), b = static_cast<std::size_t>(e.to);
    last_use[std::min(a, b)] = std::max(last_use[std::min(a, b)], std::max(a, b));
    back_edges[std::max(a, b)].push_back(&e);
  }
  struct State {
    std::int64_t cost = 0;
    std::vector<int> assignment;
  };
  std::map<std::vector<int>, State> states{{{}, State{0, std::vector<int>(n, -1)}}};
  std::vector<std::size_t> active;
  Optimum best;
  for (std::size_t v = 0; v < n; ++v) {
    std::vector<std::size_t> next_active;
    for (std::size_t u : active)
      if (last_use[u] > v) next_active.push_back(u);
    if (last_use[v] > v) next_active.push_back(v);
    std::map<std::vector<int>, State> next;
    for (const auto& [key, state] : states) {
      for (std::size_t s = 0; s < problem.nodes[v].costs.size(); ++s) {
        if (problem.nodes[v].costs[s] == kForbidden) continue;
        std::int64_t cost = state.cost + problem.nodes[v].costs[s];
        bool allowed = true;
        for (const ShardingEdge* e : back_edges[v]) {
          const auto from = static_cast<std::size_t>(e->from == static_cast<int>(v) ? static_cast<int>(s)
                                                                                     : state.assignment[static_cast<std::size_t>(e->from)]);
          const auto to = static_cast<std::size_t>(e->to == static_cast<int>(v) ? static_cast<int>(s)
                                                                                 : state.assignment[static_cast<std::size_t>(e->to)]);
          const std::int64_t c = e->costs[from * problem.nodes[static_cast<std::size_t>(e->to)].costs.size() + to];
          if (c == kForbidden) allowed = false;
          cost += c;
        }
        if (!allowed) continue;
        std::vector<int> assignment = state.assignment;
        assignment[v] = static_cast<int>(s);
        std::vector<int> next_key;
        for (std::size_t u : next_active) next_key.push_back(assignment[u]);
        auto [it, added] = next.try_emplace(std::move(next_key), State{cost, assignment});
        if (!added && cost < it->second.cost) it->second = State{cost, std::move(assignment)};
      }
    }
    states = std::move(next);
    active = std::move(next_active);
    best.widest = std::max(best.widest, states.size());
  }
  EXPECT_EQ(states.size(), 1u);
  best.cost = states.begin()->second.cost;
  best.choice.strategies = states.begin()->second.assignment;
  return best;
}

// A job over a copy of `graph` on the first `devices` GPUs of a DGX-A100, its plan made by `shard` over
// the job's own graph, materialized (and simulated when `simulate`). `shrink`: moves priced by bandwidth
// alone, as for a shrunk preset. Failures are test failures.
template <class Shard>
std::unique_ptr<api::Job> sharded_job(const ir::Graph& graph, int devices, Shard shard, bool shrink, bool simulate) {
  api::JobOptions options;
  options.policy = "dp";
  options.gpus = devices;
  options.dp = devices;
  options.shrink = shrink;
  auto job = api::load_job(options, graph);
  EXPECT_TRUE(job) << job.error().to_string();
  if (!job) return nullptr;
  Expected<plan::Plan> plan = shard((*job)->graph, (*job)->catalog);
  EXPECT_TRUE(plan) << plan.error().to_string();
  if (!plan) return nullptr;
  (*job)->plan = std::move(*plan);
  (*job)->slice_devices = devices;
  (*job)->stage = api::Stage::planned;
  auto made = api::materialize(**job);
  EXPECT_TRUE(made) << made.error().to_string();
  if (!made) return nullptr;
  if (simulate) {
    auto simulated = api::simulate(**job);
    EXPECT_TRUE(simulated) << simulated.error().to_string();
    if (!simulated) return nullptr;
  }
  return std::move(*job);
}

}  // namespace loom::search::testing
