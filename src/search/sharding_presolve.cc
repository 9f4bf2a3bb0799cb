#include "sharding_presolve.h"

#include <fmt/format.h>

#include <algorithm>
#include <deque>
#include <map>
#include <numeric>

namespace loom::search {

namespace {

// Bounds on the work one step may do, so presolve stays a small part of a solve.
constexpr std::int64_t kDominanceWork = 20'000'000;  // per node visit
constexpr std::int64_t kSeriesWork = 2'000'000;      // k_a * k_b * k_w of one series reduction
constexpr std::int64_t kSeriesCells = 4'096;         // the new edge's table

struct Node {
  std::vector<int> orig;
  std::vector<std::int64_t> costs;
  std::vector<std::int64_t> usages;
  std::vector<int> edges;  // incident live edge ids (dead ones removed lazily)
  bool eliminated = false;
};

struct Edge {
  int a = 0, b = 0;
  std::vector<std::int64_t> table;  // [s_a * k_b + s_b]
  bool alive = true;
};

class Presolver {
 public:
  explicit Presolver(const ShardingProblem& problem) : problem_(problem) {}

  Expected<Presolved> run() {
    LOOM_RETURN_IF_ERROR(load());
    std::deque<int> work;
    std::vector<char> queued(nodes_.size(), 1);
    for (std::size_t i = 0; i < nodes_.size(); ++i) work.push_back(static_cast<int>(i));
    auto push = [&](int v) {
      if (!queued[static_cast<std::size_t>(v)]) {
        queued[static_cast<std::size_t>(v)] = 1;
        work.push_back(v);
      }
    };
    while (!work.empty()) {
      const int u = work.front();
      work.pop_front();
      queued[static_cast<std::size_t>(u)] = 0;
      if (nodes_[static_cast<std::size_t>(u)].eliminated) continue;
      std::vector<int> touched;
      if (node(u).costs.size() == 1) {
        touched = fold_fixed(u);
      } else if (drop_dominated(u)) {
        touched = neighbours(u);
        touched.push_back(u);
      } else if (neutral(u)) {
        touched = eliminate(u);
      }
      for (int v : touched) push(v);
    }
    return finish();
  }

 private:
  Node& node(int i) { return nodes_[static_cast<std::size_t>(i)]; }
  Edge& edge(int e) { return edges_[static_cast<std::size_t>(e)]; }

  Expected<void> load() {
    nodes_.resize(problem_.nodes.size());
    for (std::size_t i = 0; i < problem_.nodes.size(); ++i) {
      const ShardingNode& in = problem_.nodes[i];
      Node& out = nodes_[i];
      for (std::size_t s = 0; s < in.costs.size(); ++s) {
        if (in.costs[s] == kForbidden || in.usages[s] == kForbidden) continue;
        out.orig.push_back(static_cast<int>(s));
        out.costs.push_back(in.costs[s]);
        out.usages.push_back(in.start < in.end ? in.usages[s] : 0);
      }
      if (out.orig.empty())
        return fail(fmt::format("node {}{}: every strategy is forbidden, so no choice is feasible", i,
                                in.name.empty() ? "" : fmt::format(" ('{}')", in.name)));
    }
    for (const ShardingEdge& in : problem_.edges) {
      const auto& from = nodes_[static_cast<std::size_t>(in.from)];
      const auto& to = nodes_[static_cast<std::size_t>(in.to)];
      const std::size_t to_count = problem_.nodes[static_cast<std::size_t>(in.to)].costs.size();
      std::vector<std::int64_t> table(from.orig.size() * to.orig.size());
      for (std::size_t s = 0; s < from.orig.size(); ++s)
        for (std::size_t t = 0; t < to.orig.size(); ++t)
          table[s * to.orig.size() + t] =
              in.costs[static_cast<std::size_t>(from.orig[s]) * to_count + static_cast<std::size_t>(to.orig[t])];
      if (in.from == in.to) {  // a self-loop: only its diagonal can be chosen
        Node& n = node(in.from);
        for (std::size_t s = 0; s < n.costs.size(); ++s) n.costs[s] = add_costs(n.costs[s], table[s * n.costs.size() + s]);
        continue;
      }
      add_edge(in.from, in.to, std::move(table));
    }
    return {};
  }

  // Adds `table` (rows by a's strategies) to the edge between a and b, creating it if needed.
  void add_edge(int a, int b, std::vector<std::int64_t> table) {
    const auto key = std::minmax(a, b);
    auto it = edge_of_.find(key);
    if (it != edge_of_.end() && edge(it->second).alive) {
      Edge& e = edge(it->second);
      const std::size_t kb = node(b).costs.size();
      const std::size_t e_kb = node(e.b).costs.size();
      for (std::size_t s = 0; s < node(a).costs.size(); ++s)
        for (std::size_t t = 0; t < kb; ++t) {
          std::int64_t& cell = e.a == a ? e.table[s * e_kb + t] : e.table[t * e_kb + s];
          cell = add_costs(cell, table[s * kb + t]);
        }
      return;
    }
    const int id = static_cast<int>(edges_.size());
    edges_.push_back(Edge{a, b, std::move(table), true});
    edge_of_[key] = id;
    node(a).edges.push_back(id);
    node(b).edges.push_back(id);
  }

  void prune_edges(int u) {
    auto& list = node(u).edges;
    std::erase_if(list, [&](int e) { return !edge(e).alive; });
  }

  std::vector<int> neighbours(int u) {
    prune_edges(u);
    std::vector<int> out;
    for (int e : node(u).edges) out.push_back(edge(e).a == u ? edge(e).b : edge(e).a);
    return out;
  }

  // The cost of edge e at (u's strategy s, the other end's strategy t).
  std::int64_t cell(const Edge& e, int u, std::size_t s, std::size_t t) {
    return e.a == u ? e.table[s * node(e.b).costs.size() + t] : e.table[t * node(e.b).costs.size() + s];
  }

  void kill_edge(int e) {
    edge(e).alive = false;
    edge_of_.erase(std::minmax(edge(e).a, edge(e).b));
  }

  std::vector<int> fold_fixed(int u) {
    std::vector<int> touched = neighbours(u);
    for (int e : node(u).edges) {
      const int v = edge(e).a == u ? edge(e).b : edge(e).a;
      Node& nv = node(v);
      for (std::size_t t = 0; t < nv.costs.size(); ++t) nv.costs[t] = add_costs(nv.costs[t], cell(edge(e), u, 0, t));
      kill_edge(e);
    }
    node(u).edges.clear();
    return touched;
  }

  // Drops strategies another strategy of u dominates; true when any was dropped.
  bool drop_dominated(int u) {
    prune_edges(u);
    Node& n = node(u);
    const std::size_t k = n.costs.size();
    std::int64_t row_length = 2;
    for (int e : n.edges) row_length += static_cast<std::int64_t>(node(edge(e).a == u ? edge(e).b : edge(e).a).costs.size());
    std::vector<std::size_t> order(k);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) {
      return n.costs[x] != n.costs[y] ? n.costs[x] < n.costs[y] : n.usages[x] < n.usages[y];
    });
    std::vector<char> dropped(k, 0);
    std::int64_t work = 0;
    bool any = false;
    // Only an earlier strategy in (cost, usage) order can dominate a later one.
    for (std::size_t ia = 1; ia < k && work < kDominanceWork; ++ia) {
      const std::size_t a = order[ia];
      for (std::size_t ib = 0; ib < ia && work < kDominanceWork; ++ib) {
        const std::size_t b = order[ib];
        if (dropped[b] || n.usages[b] > n.usages[a]) continue;
        work += row_length;
        if (rows_no_worse(u, b, a)) {
          dropped[a] = 1;
          any = true;
          break;
        }
      }
    }
    if (!any) return false;
    std::vector<std::size_t> keep;
    for (std::size_t s = 0; s < k; ++s)
      if (!dropped[s]) keep.push_back(s);
    restrict(u, keep);
    return true;
  }

  bool rows_no_worse(int u, std::size_t b, std::size_t a) {
    for (int e : node(u).edges) {
      const std::size_t kv = node(edge(e).a == u ? edge(e).b : edge(e).a).costs.size();
      for (std::size_t t = 0; t < kv; ++t)
        if (cell(edge(e), u, b, t) > cell(edge(e), u, a, t)) return false;
    }
    return true;
  }

  // Keeps only u's strategies `keep` (ascending), in its arrays and its edges' tables.
  void restrict(int u, const std::vector<std::size_t>& keep) {
    Node& n = node(u);
    const std::size_t k = n.costs.size();
    for (int e : n.edges) {
      Edge& ed = edge(e);
      const std::size_t kb = node(ed.b).costs.size();
      const std::size_t ka = node(ed.a).costs.size();
      std::vector<std::int64_t> table;
      if (ed.a == u) {
        for (std::size_t s : keep)
          table.insert(table.end(), ed.table.begin() + static_cast<std::ptrdiff_t>(s * kb),
                       ed.table.begin() + static_cast<std::ptrdiff_t>((s + 1) * kb));
      } else {
        for (std::size_t s = 0; s < ka; ++s)
          for (std::size_t t : keep) table.push_back(ed.table[s * k + t]);
      }
      ed.table = std::move(table);
    }
    Node out;
    for (std::size_t s : keep) {
      out.orig.push_back(n.orig[s]);
      out.costs.push_back(n.costs[s]);
      out.usages.push_back(n.usages[s]);
    }
    n.orig = std::move(out.orig);
    n.costs = std::move(out.costs);
    n.usages = std::move(out.usages);
  }

  bool neutral(int u) {
    const Node& n = node(u);
    return std::all_of(n.usages.begin(), n.usages.end(), [&](std::int64_t x) { return x == n.usages[0]; });
  }

  // Series reduction of a usage-neutral node with at most two neighbours; returns the touched nodes.
  std::vector<int> eliminate(int u) {
    prune_edges(u);
    Node& n = node(u);
    if (n.edges.size() > 2) return {};
    const std::size_t k = n.costs.size();
    Presolved::Elimination record;
    record.node = u;
    record.strategies = n.orig;
    record.costs = n.costs;
    std::vector<int> nbrs;
    for (int e : n.edges) {
      const int v = edge(e).a == u ? edge(e).b : edge(e).a;
      const std::size_t kv = node(v).costs.size();
      std::vector<std::int64_t> table(k * kv);
      for (std::size_t s = 0; s < k; ++s)
        for (std::size_t t = 0; t < kv; ++t) table[s * kv + t] = cell(edge(e), u, s, t);
      nbrs.push_back(v);
      record.neighbours.push_back(v);
      record.neighbour_strategies.push_back(node(v).orig);
      record.tables.push_back(std::move(table));
    }
    if (nbrs.size() == 2) {
      const auto ka = static_cast<std::int64_t>(node(nbrs[0]).costs.size());
      const auto kb = static_cast<std::int64_t>(node(nbrs[1]).costs.size());
      if (ka * kb > kSeriesCells || ka * kb * static_cast<std::int64_t>(k) > kSeriesWork) return {};
      std::vector<std::int64_t> table(static_cast<std::size_t>(ka * kb), kForbidden);
      for (std::size_t ta = 0; ta < static_cast<std::size_t>(ka); ++ta)
        for (std::size_t tb = 0; tb < static_cast<std::size_t>(kb); ++tb)
          for (std::size_t s = 0; s < k; ++s) {
            const std::int64_t c = add_costs(add_costs(n.costs[s], record.tables[0][s * static_cast<std::size_t>(ka) + ta]),
                                             record.tables[1][s * static_cast<std::size_t>(kb) + tb]);
            std::int64_t& best = table[ta * static_cast<std::size_t>(kb) + tb];
            best = std::min(best, c);
          }
      for (int e : n.edges) kill_edge(e);
      add_edge(nbrs[0], nbrs[1], std::move(table));
    } else if (nbrs.size() == 1) {
      Node& v = node(nbrs[0]);
      const std::size_t kv = v.costs.size();
      for (std::size_t t = 0; t < kv; ++t) {
        std::int64_t best = kForbidden;
        for (std::size_t s = 0; s < k; ++s) best = std::min(best, add_costs(n.costs[s], record.tables[0][s * kv + t]));
        v.costs[t] = add_costs(v.costs[t], best);
      }
      kill_edge(n.edges[0]);
    }
    n.edges.clear();
    n.eliminated = true;
    eliminations_.push_back(std::move(record));
    return nbrs;
  }

  Presolved finish() {
    Presolved out;
    out.core.name = problem_.name;
    out.core.usage_limit = problem_.usage_limit;
    out.core.nodes.resize(nodes_.size());
    out.kept.resize(nodes_.size());
    for (std::size_t i = 0; i < nodes_.size(); ++i) {
      const Node& n = nodes_[i];
      ShardingNode& c = out.core.nodes[i];
      c.name = problem_.nodes[i].name;
      c.start = problem_.nodes[i].start;
      c.end = problem_.nodes[i].end;
      if (n.eliminated) {  // its usage, equal for every strategy, stays in the profile
        c.costs = {0};
        c.usages = {n.usages[0]};
        out.kept[i] = {-1};
        ++out.nodes_eliminated;
      } else {
        c.costs = n.costs;
        c.usages = n.usages;
        out.kept[i] = n.orig;
        if (n.costs.size() > 1) ++out.free_nodes;
      }
      out.strategies_dropped += static_cast<std::int64_t>(problem_.nodes[i].costs.size()) -
                                static_cast<std::int64_t>(n.eliminated ? 1 : n.costs.size());
    }
    for (const Edge& e : edges_)
      if (e.alive) out.core.edges.push_back(ShardingEdge{e.a, e.b, e.table});
    out.eliminations = std::move(eliminations_);
    return out;
  }

  const ShardingProblem& problem_;
  std::vector<Node> nodes_;
  std::vector<Edge> edges_;
  std::map<std::pair<int, int>, int> edge_of_;
  std::vector<Presolved::Elimination> eliminations_;
};

std::size_t position(const std::vector<int>& list, int value) {
  return static_cast<std::size_t>(std::find(list.begin(), list.end(), value) - list.begin());
}

}  // namespace

Expected<Presolved> presolve(const ShardingProblem& problem) { return Presolver(problem).run(); }

ShardingChoice recover_choice(const Presolved& presolved, const ShardingChoice& core_choice) {
  ShardingChoice out;
  out.strategies.resize(core_choice.strategies.size());
  for (std::size_t i = 0; i < core_choice.strategies.size(); ++i)
    out.strategies[i] = presolved.kept[i][static_cast<std::size_t>(core_choice.strategies[i])];
  for (auto it = presolved.eliminations.rbegin(); it != presolved.eliminations.rend(); ++it) {
    const auto& record = *it;
    std::int64_t best = kForbidden;
    int best_strategy = record.strategies[0];
    for (std::size_t s = 0; s < record.strategies.size(); ++s) {
      std::int64_t c = record.costs[s];
      for (std::size_t j = 0; j < record.neighbours.size(); ++j) {
        const auto& strategies = record.neighbour_strategies[j];
        const std::size_t t = position(strategies, out.strategies[static_cast<std::size_t>(record.neighbours[j])]);
        c = add_costs(c, record.tables[j][s * strategies.size() + t]);
      }
      if (c < best) {
        best = c;
        best_strategy = record.strategies[s];
      }
    }
    out.strategies[static_cast<std::size_t>(record.node)] = best_strategy;
  }
  return out;
}

}  // namespace loom::search
