// A test problem for the MILP and the solver's deadline: a grid of 3-strategy nodes with random edge
// costs and a binding usage limit. Its LP relaxation is fractional, so the MILP branches; side 12 is an LP
// of thousands of rows, side 40 one that no test's deadline lets CBC close.
#pragma once

#include <random>

#include "loom/search/sharding_problem.h"

namespace loom::search {

inline ShardingProblem random_grid(int side, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  ShardingProblem p;
  for (int i = 0; i < side * side; ++i)
    p.nodes.push_back({"", i % side, i % side + 2,
                       {static_cast<std::int64_t>(rng() % 100), static_cast<std::int64_t>(rng() % 100), 50},
                       {1, 3, 2}});
  auto link = [&](int a, int b) {
    ShardingEdge edge{a, b, {}};
    for (int c = 0; c < 9; ++c) edge.costs.push_back(static_cast<std::int64_t>(rng() % 60));
    p.edges.push_back(edge);
  };
  for (int r = 0; r < side; ++r)
    for (int c = 0; c < side; ++c) {
      if (c + 1 < side) link(r * side + c, r * side + c + 1);
      if (r + 1 < side) link(r * side + c, (r + 1) * side + c);
    }
  p.usage_limit = 4 * side;
  return p;
}

}  // namespace loom::search
