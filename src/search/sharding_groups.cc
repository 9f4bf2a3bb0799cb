#include "sharding_groups.h"

#include <algorithm>
#include <deque>
#include <map>
#include <utility>

#include "sharding_local_search.h"

namespace loom::search {
namespace {

struct Arc {
  int edge;
  int other;
  bool from;  // this node is the edge's `from` end
};

std::vector<std::vector<Arc>> arcs_of(const ShardingProblem& core) {
  std::vector<std::vector<Arc>> arcs(core.nodes.size());
  for (std::size_t e = 0; e < core.edges.size(); ++e) {
    const ShardingEdge& edge = core.edges[e];
    arcs[static_cast<std::size_t>(edge.from)].push_back({static_cast<int>(e), edge.to, true});
    arcs[static_cast<std::size_t>(edge.to)].push_back({static_cast<int>(e), edge.from, false});
  }
  return arcs;
}

// The edge's cost with this end at s and the other end at t.
std::int64_t arc_cost(const ShardingProblem& core, const Arc& arc, int s, int t) {
  const ShardingEdge& edge = core.edges[static_cast<std::size_t>(arc.edge)];
  const std::size_t kt = core.nodes[static_cast<std::size_t>(edge.to)].costs.size();
  const auto a = static_cast<std::size_t>(arc.from ? s : t);
  const auto b = static_cast<std::size_t>(arc.from ? t : s);
  return edge.costs[a * kt + b];
}

bool affordable(std::int64_t cost) { return cost < kNearForbidden; }

// a + b, saturating below kForbidden unless either is forbidden.
std::int64_t add_capped(std::int64_t a, std::int64_t b) {
  if (a == kForbidden || b == kForbidden) return kForbidden;
  return b > kForbidden - 1 - a ? kForbidden - 1 : a + b;
}

// True when each affordable strategy of u leaves v at most one affordable strategy across this arc.
bool ties(const ShardingProblem& core, int u, const Arc& arc) {
  const ShardingNode& from = core.nodes[static_cast<std::size_t>(u)];
  const ShardingNode& to = core.nodes[static_cast<std::size_t>(arc.other)];
  for (std::size_t s = 0; s < from.costs.size(); ++s) {
    if (!affordable(from.costs[s])) continue;
    int partners = 0;
    for (std::size_t t = 0; t < to.costs.size(); ++t)
      partners += affordable(to.costs[t]) && affordable(arc_cost(core, arc, static_cast<int>(s), static_cast<int>(t)));
    if (partners > 1) return false;
  }
  return true;
}

// Nodes ordered so that a node comes before those its strategy ties (reverse DFS finishing order over
// the tie arcs): groups then grow from the nodes that fix others.
std::vector<int> tie_order(const ShardingProblem& core, const std::vector<std::vector<Arc>>& arcs) {
  const std::size_t n = core.nodes.size();
  std::vector<std::vector<int>> next(n);
  for (std::size_t u = 0; u < n; ++u)
    for (const Arc& arc : arcs[u])
      if (core.nodes[static_cast<std::size_t>(arc.other)].costs.size() > 1 && ties(core, static_cast<int>(u), arc))
        next[u].push_back(arc.other);
  std::vector<int> order;
  std::vector<char> seen(n, 0);
  std::vector<std::pair<int, std::size_t>> stack;
  for (std::size_t r = 0; r < n; ++r) {
    if (seen[r]) continue;
    seen[r] = 1;
    stack.push_back({static_cast<int>(r), 0});
    while (!stack.empty()) {
      auto& [u, i] = stack.back();
      const auto& out = next[static_cast<std::size_t>(u)];
      if (i < out.size()) {
        const int v = out[i++];
        if (!seen[static_cast<std::size_t>(v)]) {
          seen[static_cast<std::size_t>(v)] = 1;
          stack.push_back({v, 0});
        }
      } else {
        order.push_back(u);
        stack.pop_back();
      }
    }
  }
  std::reverse(order.begin(), order.end());
  return order;
}

}  // namespace

NodeGroups group_nodes(const ShardingProblem& core) {
  const std::size_t n = core.nodes.size();
  const auto arcs = arcs_of(core);
  NodeGroups groups;
  groups.group_of.assign(n, -1);
  groups.follow.resize(n);
  std::vector<int> follows;
  std::deque<int> queue;
  for (int root : tie_order(core, arcs)) {
    const auto r = static_cast<std::size_t>(root);
    const ShardingNode& root_node = core.nodes[r];
    if (groups.group_of[r] >= 0 || root_node.costs.size() < 2) continue;
    const int g = static_cast<int>(groups.members.size());
    const std::size_t k = root_node.costs.size();
    groups.members.push_back({root});
    groups.group_of[r] = g;
    groups.follow[r].resize(k);
    for (std::size_t s = 0; s < k; ++s) groups.follow[r][s] = static_cast<int>(s);
    queue.assign(1, root);
    while (!queue.empty()) {
      const int x = queue.front();
      queue.pop_front();
      for (const Arc& arc : arcs[static_cast<std::size_t>(x)]) {
        const auto y = static_cast<std::size_t>(arc.other);
        const ShardingNode& node = core.nodes[y];
        if (groups.group_of[y] >= 0 || node.costs.size() < 2) continue;
        // Per root strategy, y's one affordable strategy against the members it touches.
        follows.assign(k, -1);
        bool joins = true;
        for (std::size_t s = 0; s < k && joins; ++s) {
          int only = -1, count = 0, cheapest = 0;
          for (std::size_t t = 0; t < node.costs.size(); ++t) {
            if (node.costs[t] < node.costs[static_cast<std::size_t>(cheapest)]) cheapest = static_cast<int>(t);
            bool fits = affordable(node.costs[t]);
            for (const Arc& back : arcs[y]) {
              if (!fits) break;
              const auto z = static_cast<std::size_t>(back.other);
              if (groups.group_of[z] != g) continue;
              fits = affordable(arc_cost(core, back, static_cast<int>(t), groups.follow[z][s]));
            }
            if (fits) {
              only = static_cast<int>(t);
              ++count;
            }
          }
          if (affordable(root_node.costs[s]))
            joins = count == 1;
          else
            only = count > 0 ? only : cheapest;  // the root's strategy pays a marker anyway
          follows[s] = only;
        }
        if (!joins) continue;
        groups.group_of[y] = g;
        groups.follow[y] = follows;
        groups.members[static_cast<std::size_t>(g)].push_back(arc.other);
        queue.push_back(arc.other);
      }
    }
  }
  return groups;
}

ShardingProblem group_problem(const ShardingProblem& core, const NodeGroups& groups) {
  ShardingProblem out;
  out.name = core.name;
  out.usage_limit = kForbidden;
  for (const auto& members : groups.members) {
    const std::size_t k = core.nodes[static_cast<std::size_t>(members.front())].costs.size();
    out.nodes.push_back(ShardingNode{"", 0, 0, std::vector<std::int64_t>(k, 0), std::vector<std::int64_t>(k, 0)});
  }
  std::map<std::pair<int, int>, std::size_t> edge_of;  // (from group, to group) -> edge index
  for (std::size_t u = 0; u < core.nodes.size(); ++u) {
    const int g = groups.group_of[u];
    if (g < 0) continue;
    ShardingNode& node = out.nodes[static_cast<std::size_t>(g)];
    for (std::size_t s = 0; s < node.costs.size(); ++s)
      node.costs[s] = add_capped(node.costs[s], core.nodes[u].costs[static_cast<std::size_t>(groups.follow[u][s])]);
  }
  for (const ShardingEdge& edge : core.edges) {
    const auto a = static_cast<std::size_t>(edge.from);
    const auto b = static_cast<std::size_t>(edge.to);
    const int ga = groups.group_of[a];
    const int gb = groups.group_of[b];
    const std::size_t kb = core.nodes[b].costs.size();
    auto cell = [&](int sa, int sb) { return edge.costs[static_cast<std::size_t>(sa) * kb + static_cast<std::size_t>(sb)]; };
    if (ga < 0 && gb < 0) continue;  // two one-strategy nodes: a constant (presolve leaves none)
    if (ga < 0 || gb < 0 || ga == gb) {  // a node cost of one group
      const int g = ga < 0 ? gb : ga;
      ShardingNode& node = out.nodes[static_cast<std::size_t>(g)];
      for (std::size_t s = 0; s < node.costs.size(); ++s) {
        const int sa = ga < 0 ? 0 : groups.follow[a][s];
        const int sb = gb < 0 ? 0 : groups.follow[b][s];
        node.costs[s] = add_capped(node.costs[s], cell(sa, sb));
      }
      continue;
    }
    const bool flipped = edge_of.count({gb, ga}) > 0;
    const std::pair<int, int> key = flipped ? std::pair{gb, ga} : std::pair{ga, gb};
    auto [it, fresh] = edge_of.try_emplace(key, out.edges.size());
    const std::size_t kf = out.nodes[static_cast<std::size_t>(key.first)].costs.size();
    const std::size_t kt = out.nodes[static_cast<std::size_t>(key.second)].costs.size();
    if (fresh) out.edges.push_back(ShardingEdge{key.first, key.second, std::vector<std::int64_t>(kf * kt, 0)});
    ShardingEdge& merged = out.edges[it->second];
    for (std::size_t s = 0; s < kf; ++s)
      for (std::size_t t = 0; t < kt; ++t) {
        const std::size_t sa = flipped ? t : s;  // ga's root strategy
        const std::size_t sb = flipped ? s : t;
        merged.costs[s * kt + t] = add_capped(merged.costs[s * kt + t], cell(groups.follow[a][sa], groups.follow[b][sb]));
      }
  }
  return out;
}

ShardingChoice expand_groups(const ShardingProblem& core, const NodeGroups& groups, const ShardingChoice& group_choice) {
  ShardingChoice out{std::vector<int>(core.nodes.size(), 0)};
  for (std::size_t u = 0; u < core.nodes.size(); ++u) {
    const int g = groups.group_of[u];
    if (g >= 0) out.strategies[u] = groups.follow[u][static_cast<std::size_t>(group_choice.strategies[static_cast<std::size_t>(g)])];
  }
  return out;
}

ShardingChoice restrict_to_groups(const NodeGroups& groups, const ShardingChoice& choice) {
  ShardingChoice out;
  for (const auto& members : groups.members)
    out.strategies.push_back(choice.strategies[static_cast<std::size_t>(members.front())]);
  return out;
}

}  // namespace loom::search
