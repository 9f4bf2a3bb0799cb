// Presolve of a sharding problem (the solver's first step): a smaller "core" problem over the same
// nodes whose optimum maps back to an optimum of the original.
//  - forbidden strategies are dropped, parallel edges summed into one table;
//  - a strategy is dropped when another of the node's is no worse in cost, usage and every incident edge
//    row (dominance; memory only ever improves by the swap, so optimality and feasibility are kept);
//  - a node left with one strategy is fixed: its edges' rows become its neighbours' node costs;
//  - a node whose choice cannot change the usage profile (an empty interval, or equal usages) and that
//    has at most two neighbours is eliminated exactly: one neighbour gets min over its strategies of node
//    + edge cost as node costs; two get a new edge of those minima (series reduction, as in chain
//    following). Its choice is recovered from its neighbours' afterwards.
// An eliminated or fixed node stays in the core as a one-strategy node without edges (its usage kept),
// so node indices and the usage profile are those of the original.
#pragma once

#include <cstdint>
#include <vector>

#include "loom/core/error.h"
#include "loom/search/sharding_problem.h"

namespace loom::search {

struct Presolved {
  ShardingProblem core;                 // same nodes as the original; fewer strategies and edges
  std::vector<std::vector<int>> kept;   // per node: the original strategy index of each core strategy

  // How a node eliminated by series reduction picks its strategy once its neighbours are chosen.
  struct Elimination {
    int node = 0;
    std::vector<int> strategies;                  // original indices it may take
    std::vector<std::int64_t> costs;              // per strategy
    std::vector<int> neighbours;                  // 0, 1 or 2 original node indices
    std::vector<std::vector<int>> neighbour_strategies;   // per neighbour, the original indices its table covers
    std::vector<std::vector<std::int64_t>> tables;        // per neighbour, [s * |neighbour_strategies| + t]
  };
  std::vector<Elimination> eliminations;  // in order; recovered in reverse

  int free_nodes = 0;          // core nodes with more than one strategy
  std::int64_t strategies_dropped = 0;
  int nodes_eliminated = 0;
};

// Errors: a node whose every strategy is forbidden (naming it).
Expected<Presolved> presolve(const ShardingProblem& problem);

// The original problem's choice from a core choice.
ShardingChoice recover_choice(const Presolved& presolved, const ShardingChoice& core_choice);

}  // namespace loom::search
