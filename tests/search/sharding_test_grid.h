// Test problems for the MILP, the group step and the solver's deadline. random_grid: a grid of 3-strategy
// nodes with random edge costs and a binding usage limit; its LP relaxation is fractional, so the MILP
// branches; side 12 is an LP of thousands of rows, side 40 one that no test's deadline lets CBC close.
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

// A 4 x 4 layout of groups, each a 4 x 4 grid of 3-strategy nodes tied one-to-one (any other pair costs the
// near-forbidden marker), neighbouring groups joined by random edges: the group step's problem. Every node
// is live at once with usages 1, 2, 3; the limit is `limit_per_node` per node (3: it never binds).
inline ShardingProblem grid_of_groups(std::uint64_t seed, double limit_per_node = 3) {
  constexpr int kSide = 4, kGroupSide = 4;
  constexpr std::int64_t kTie = 1'000'000'000'000'000'000;  // the contest's near-forbidden marker
  std::mt19937_64 rng(seed);
  ShardingProblem p;
  auto node = [](int gr, int gc, int r, int c) {
    return ((gr * kSide + gc) * kGroupSide + r) * kGroupSide + c;
  };
  for (int i = 0; i < kSide * kSide * kGroupSide * kGroupSide; ++i)
    p.nodes.push_back({"", 0, 1, {static_cast<std::int64_t>(rng() % 100), static_cast<std::int64_t>(rng() % 100), 50},
                       {1, 2, 3}});
  auto link = [&](int a, int b, bool tie) {
    ShardingEdge edge{a, b, {}};
    for (int s = 0; s < 3; ++s)
      for (int t = 0; t < 3; ++t) edge.costs.push_back(tie ? (s == t ? 0 : kTie) : static_cast<std::int64_t>(rng() % 60));
    p.edges.push_back(edge);
  };
  for (int gr = 0; gr < kSide; ++gr)
    for (int gc = 0; gc < kSide; ++gc)
      for (int r = 0; r < kGroupSide; ++r)
        for (int c = 0; c < kGroupSide; ++c) {
          if (c + 1 < kGroupSide) link(node(gr, gc, r, c), node(gr, gc, r, c + 1), true);
          if (r + 1 < kGroupSide) link(node(gr, gc, r, c), node(gr, gc, r + 1, c), true);
        }
  for (int gr = 0; gr < kSide; ++gr)
    for (int gc = 0; gc < kSide; ++gc)
      for (int i = 0; i < kGroupSide; ++i) {
        if (gc + 1 < kSide) link(node(gr, gc, i, kGroupSide - 1), node(gr, gc + 1, i, 0), false);
        if (gr + 1 < kSide) link(node(gr, gc, kGroupSide - 1, i), node(gr + 1, gc, 0, i), false);
      }
  p.usage_limit = static_cast<std::int64_t>(limit_per_node * static_cast<double>(p.nodes.size()));
  return p;
}

}  // namespace loom::search
