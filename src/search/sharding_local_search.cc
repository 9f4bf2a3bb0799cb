#include "sharding_local_search.h"

#include <algorithm>
#include <deque>
#include <limits>
#include <tuple>

#include "sharding_move_shares.h"

namespace loom::search {
namespace {

constexpr WideCost kPenalty = kForbiddenPenalty;
constexpr WideCost kInfinite = WideCost{1} << 120;
// Large tree moves (targeted ones, and a kind of untargeted move) may grow this many times larger than
// ordinary ones.
constexpr int kLargeTreeFactor = 8;
// The prior share of untargeted large tree moves (sharding_move_shares.h).
constexpr double kLargeTreeShare = 0.125;
// The price of one unit of usage increase in the tree move's second tier: above ordinary costs per byte,
// far below a forbidden choice's penalty.
constexpr WideCost kUsagePrice = WideCost{1} << 40;

WideCost priced(std::int64_t cost) { return cost == kForbidden ? kPenalty : WideCost{cost}; }

}  // namespace

LocalSearch::LocalSearch(const ShardingProblem& core, std::uint64_t seed)
    : core_(core), arcs_(core.nodes.size()), profile_(core), rng_(seed), in_tree_(core.nodes.size(), 0) {
  for (std::size_t e = 0; e < core.edges.size(); ++e) {
    const ShardingEdge& edge = core.edges[e];
    const std::size_t to_count = core.nodes[static_cast<std::size_t>(edge.to)].costs.size();
    arcs_[static_cast<std::size_t>(edge.from)].push_back(Arc{static_cast<int>(e), edge.to, true, edge.costs.data(), to_count, 1});
    arcs_[static_cast<std::size_t>(edge.to)].push_back(Arc{static_cast<int>(e), edge.from, false, edge.costs.data(), 1, to_count});
  }
  for (std::size_t i = 0; i < core.nodes.size(); ++i)
    if (core.nodes[i].costs.size() > 1) free_nodes_.push_back(static_cast<int>(i));
}

ShardingChoice LocalSearch::least_usage(const ShardingProblem& core, std::int64_t cost_below) {
  ShardingChoice choice;
  for (const ShardingNode& node : core.nodes) {
    std::optional<std::size_t> best;
    for (std::size_t s = 0; s < node.costs.size(); ++s) {
      if (node.costs[s] >= cost_below) continue;
      if (!best || node.usages[s] < node.usages[*best] ||
          (node.usages[s] == node.usages[*best] && node.costs[s] < node.costs[*best]))
        best = s;
    }
    if (!best) best = static_cast<std::size_t>(std::min_element(node.costs.begin(), node.costs.end()) - node.costs.begin());
    choice.strategies.push_back(static_cast<int>(*best));
  }
  return choice;
}

ShardingChoice LocalSearch::consistent_start(const ShardingProblem& core) {
  LocalSearch view(core, 0);  // for its arcs
  const std::size_t n = core.nodes.size();
  ShardingChoice choice{least_usage(core).strategies};
  std::vector<char> assigned(n, 0);
  std::deque<int> queue;
  for (std::size_t first = 0; first < n; ++first) {
    if (assigned[first]) continue;
    assigned[first] = 1;  // a component's first node keeps its least usage
    queue.push_back(static_cast<int>(first));
    while (!queue.empty()) {
      const int u = queue.front();
      queue.pop_front();
      for (const Arc& arc : view.arcs_[static_cast<std::size_t>(u)]) {
        const auto v = static_cast<std::size_t>(arc.other);
        if (assigned[v]) continue;
        const ShardingNode& node = core.nodes[v];
        // (near-forbidden terms against assigned neighbours, usage, cost): lexicographically least.
        std::tuple<int, std::int64_t, WideCost> best{std::numeric_limits<int>::max(), 0, 0};
        for (std::size_t s = 0; s < node.costs.size(); ++s) {
          int marks = node.costs[s] >= kNearForbidden;
          WideCost cost = priced(node.costs[s]);
          for (const Arc& back : view.arcs_[v]) {
            if (!assigned[static_cast<std::size_t>(back.other)]) continue;
            const WideCost c =
                view.arc_cost(back, static_cast<int>(s), choice.strategies[static_cast<std::size_t>(back.other)]);
            marks += c >= WideCost{kNearForbidden};
            cost += c;
          }
          const std::tuple<int, std::int64_t, WideCost> key{marks, node.usages[s], cost};
          if (key < best) {
            best = key;
            choice.strategies[v] = static_cast<int>(s);
          }
        }
        assigned[v] = 1;
        queue.push_back(static_cast<int>(v));
      }
    }
  }
  return choice;
}

WideCost LocalSearch::node_cost(int u, int s) const {
  return priced(core_.nodes[static_cast<std::size_t>(u)].costs[static_cast<std::size_t>(s)]);
}

WideCost LocalSearch::total_cost() const {
  WideCost total = 0;
  for (std::size_t i = 0; i < core_.nodes.size(); ++i) total += node_cost(static_cast<int>(i), current_.strategies[i]);
  for (std::size_t i = 0; i < core_.nodes.size(); ++i)
    for (const Arc& arc : arcs_[i])
      if (arc.from)
        total += arc_cost(arc, current_.strategies[i], current_.strategies[static_cast<std::size_t>(arc.other)]);
  return total;
}

void LocalSearch::set(int u, int s) {
  const auto i = static_cast<std::size_t>(u);
  const auto& usages = core_.nodes[i].usages;
  profile_.add(u, usages[static_cast<std::size_t>(s)] - usages[static_cast<std::size_t>(current_.strategies[i])]);
  current_.strategies[i] = s;
}

bool LocalSearch::start_from(const ShardingChoice& start) {
  current_ = start;
  profile_ = UsageProfile(core_);
  for (std::size_t i = 0; i < core_.nodes.size(); ++i)
    profile_.add(static_cast<int>(i), core_.nodes[i].usages[static_cast<std::size_t>(start.strategies[i])]);
  current_cost_ = total_cost();
  best_ = current_;
  best_cost_ = current_cost_;
  return profile_.peak() <= core_.usage_limit;
}

bool LocalSearch::best_forbidden() const { return best_cost_ >= kPenalty; }

bool LocalSearch::best_response(int u) {
  const auto i = static_cast<std::size_t>(u);
  const ShardingNode& node = core_.nodes[i];
  const int now = current_.strategies[i];
  const std::int64_t room = core_.usage_limit - profile_.max_over(u);
  const auto k = static_cast<int>(node.costs.size());
  WideCost best_delta = 0;
  int best = now;
  for (int s = 0; s < k; ++s) {
    if (s == now || node.usages[static_cast<std::size_t>(s)] - node.usages[static_cast<std::size_t>(now)] > room) continue;
    WideCost delta = node_cost(u, s) - node_cost(u, now);
    for (const Arc& arc : arcs_[i]) {
      const int t = current_.strategies[static_cast<std::size_t>(arc.other)];
      delta += arc_cost(arc, s, t) - arc_cost(arc, now, t);
    }
    if (delta < best_delta) {
      best_delta = delta;
      best = s;
    }
  }
  if (best == now) return false;
  set(u, best);
  current_cost_ += best_delta;
  return true;
}

void LocalSearch::sweep() {
  std::deque<int> work(free_nodes_.begin(), free_nodes_.end());
  std::vector<char> queued(core_.nodes.size(), 0);
  for (int u : free_nodes_) queued[static_cast<std::size_t>(u)] = 1;
  while (!work.empty()) {
    const int u = work.front();
    work.pop_front();
    queued[static_cast<std::size_t>(u)] = 0;
    if (!best_response(u)) continue;
    for (const Arc& arc : arcs_[static_cast<std::size_t>(u)]) {
      const auto v = static_cast<std::size_t>(arc.other);
      if (!queued[v] && core_.nodes[v].costs.size() > 1) {
        queued[v] = 1;
        work.push_back(arc.other);
      }
    }
  }
}

std::optional<std::vector<int>> LocalSearch::solve_tree(const std::vector<int>& order,
                                                        const std::vector<int>& parent_arc,
                                                        const std::function<bool(int, int)>& allowed,
                                                        const std::function<WideCost(int, int)>& surcharge,
                                                        WideCost& value) const {
  const std::size_t n = order.size();
  std::vector<std::vector<WideCost>> f(n);
  std::vector<std::vector<int>> arg(n);  // per node, its best strategy for each of its parent's
  for (std::size_t i = 0; i < n; ++i) {
    const int u = order[i];
    const auto k = core_.nodes[static_cast<std::size_t>(u)].costs.size();
    f[i].assign(k, 0);
    for (std::size_t s = 0; s < k; ++s) {
      if (!allowed(u, static_cast<int>(s))) {
        f[i][s] = kInfinite;
        continue;
      }
      WideCost c = node_cost(u, static_cast<int>(s));
      if (surcharge) c += surcharge(u, static_cast<int>(s));
      for (const Arc& arc : arcs_[static_cast<std::size_t>(u)])
        if (!in_tree_[static_cast<std::size_t>(arc.other)])
          c += arc_cost(arc, static_cast<int>(s), current_.strategies[static_cast<std::size_t>(arc.other)]);
      f[i][s] = c;
    }
  }
  // Children before parents: the reverse of the growth order.
  for (std::size_t i = n; i-- > 1;) {
    const int u = order[i];
    const Arc& up = arcs_[static_cast<std::size_t>(u)][static_cast<std::size_t>(parent_arc[i])];
    const auto p = static_cast<std::size_t>(in_tree_[static_cast<std::size_t>(up.other)] - 1);
    const std::size_t kp = f[p].size();
    arg[i].assign(kp, 0);
    for (std::size_t t = 0; t < kp; ++t) {
      WideCost best = kInfinite;
      int best_s = 0;
      for (std::size_t s = 0; s < f[i].size(); ++s) {
        if (f[i][s] >= kInfinite) continue;
        const WideCost c = f[i][s] + arc_cost(up, static_cast<int>(s), static_cast<int>(t));
        if (c < best) {
          best = c;
          best_s = static_cast<int>(s);
        }
      }
      arg[i][t] = best_s;
      f[p][t] = std::min(kInfinite, f[p][t] + best);
    }
  }
  const auto root_best = std::min_element(f[0].begin(), f[0].end());
  if (*root_best >= kInfinite) return std::nullopt;
  value = *root_best;
  std::vector<int> chosen(n);
  chosen[0] = static_cast<int>(root_best - f[0].begin());
  for (std::size_t i = 1; i < n; ++i) {
    const Arc& up = arcs_[static_cast<std::size_t>(order[i])][static_cast<std::size_t>(parent_arc[i])];
    const auto p = static_cast<std::size_t>(in_tree_[static_cast<std::size_t>(up.other)] - 1);
    chosen[i] = arg[i][static_cast<std::size_t>(chosen[p])];
  }
  return chosen;
}

bool LocalSearch::tree_move(int root, int size) {
  // Grow a tree: a node joins when exactly one of its arcs reaches the tree (no cycle closes).
  std::vector<int> order{root};
  std::vector<int> parent_arc{-1};
  in_tree_[static_cast<std::size_t>(root)] = 1;
  for (std::size_t head = 0; head < order.size() && static_cast<int>(order.size()) < size; ++head) {
    const auto& arcs = arcs_[static_cast<std::size_t>(order[head])];
    const std::size_t offset = arcs.empty() ? 0 : rng_() % arcs.size();
    for (std::size_t j = 0; j < arcs.size() && static_cast<int>(order.size()) < size; ++j) {
      const int w = arcs[(j + offset) % arcs.size()].other;
      const auto wi = static_cast<std::size_t>(w);
      if (in_tree_[wi] || core_.nodes[wi].costs.size() < 2) continue;
      int links = 0, link = -1;
      for (std::size_t a = 0; a < arcs_[wi].size(); ++a)
        if (in_tree_[static_cast<std::size_t>(arcs_[wi][a].other)]) {
          ++links;
          link = static_cast<int>(a);
        }
      if (links != 1) continue;
      order.push_back(w);
      parent_arc.push_back(link);
      in_tree_[wi] = static_cast<int>(order.size());
    }
  }
  // The tree's cost at the current strategies: its nodes and every arc with an end in it.
  auto tree_cost = [&] { return marked_cost(order); };
  const WideCost present = tree_cost();
  auto usage_of = [&](int u, int s) { return core_.nodes[static_cast<std::size_t>(u)].usages[static_cast<std::size_t>(s)]; };
  auto increase = [&](int u, int s) { return usage_of(u, s) - usage_of(u, current_.strategies[static_cast<std::size_t>(u)]); };
  auto any = [](int, int) { return true; };
  auto within_room = [&](int u, int s) { return increase(u, s) <= 0 || increase(u, s) <= core_.usage_limit - profile_.max_over(u); };
  auto no_increase = [&](int u, int s) { return increase(u, s) <= 0; };
  // Tiers, from the exact optimum to the always-feasible; the second prices each unit of usage increase
  // high enough to outweigh ordinary costs, so it mostly buys the removal of near-forbidden ones.
  struct Tier {
    std::function<bool(int, int)> allowed;
    WideCost usage_price;
  };
  const Tier tiers[] = {{any, 0}, {any, kUsagePrice}, {within_room, 0}, {no_increase, 0}};
  bool moved = false;
  for (const Tier& tier : tiers) {
    WideCost value = 0;
    std::function<WideCost(int, int)> surcharge;
    if (tier.usage_price > 0)
      surcharge = [&](int u, int s) { return tier.usage_price * std::max<std::int64_t>(0, increase(u, s)); };
    const auto chosen = solve_tree(order, parent_arc, tier.allowed, surcharge, value);
    if (!chosen || value > present + (tier.usage_price > 0 ? kInfinite / 2 : 0)) continue;
    std::vector<int> before(order.size());
    for (std::size_t i = 0; i < order.size(); ++i) {
      before[i] = current_.strategies[static_cast<std::size_t>(order[i])];
      set(order[i], (*chosen)[i]);
    }
    const WideCost after = tree_cost();
    if (after <= present && profile_.peak() <= core_.usage_limit) {
      current_cost_ += after - present;
      moved = before != *chosen;
      break;
    }
    for (std::size_t i = 0; i < order.size(); ++i) set(order[i], before[i]);
  }
  for (int u : order) in_tree_[static_cast<std::size_t>(u)] = 0;
  return moved;
}

std::vector<int> LocalSearch::near_forbidden_nodes() const {
  std::vector<int> out;
  for (int u : free_nodes_) {
    const auto i = static_cast<std::size_t>(u);
    const int s = current_.strategies[i];
    bool marked = core_.nodes[i].costs[static_cast<std::size_t>(s)] >= kNearForbidden;
    for (const Arc& arc : arcs_[i])
      marked = marked || arc_cost(arc, s, current_.strategies[static_cast<std::size_t>(arc.other)]) >= kNearForbidden;
    if (marked) out.push_back(u);
  }
  return out;
}

void LocalSearch::run(const LocalSearchLimits& limits, const std::function<void(std::int64_t, WideCost)>& report) {
  if (free_nodes_.empty()) return;
  sweep();
  auto keep_best = [&] {
    if (current_cost_ < best_cost_) {
      best_cost_ = current_cost_;
      best_ = current_;
    }
  };
  keep_best();
  std::uniform_int_distribution<std::size_t> pick(0, free_nodes_.size() - 1);
  std::uniform_int_distribution<int> tree_size(2, std::max(2, limits.max_tree_nodes));
  std::uniform_int_distribution<int> large_tree(2, std::max(2, limits.max_tree_nodes * kLargeTreeFactor));
  std::vector<int> marked;  // free nodes paying a near-forbidden cost, refreshed now and then
  const std::int64_t begun = iterations_;  // a search may run again; each run has its own budget
  // Untargeted moves: the kinds' shares adapt to their recent gain per second (under a deadline).
  const double region_prior = limits.region_every > 0 ? 1.0 / limits.region_every : 0;
  const double chain_prior = limits.chain_every > 0 ? 1.0 / limits.chain_every : 0;
  const double large_prior = kLargeTreeShare;
  MoveShares shares({std::max(0.0, 1 - region_prior - chain_prior - large_prior), large_prior, chain_prior, region_prior});
  using Clock = std::chrono::steady_clock;
  for (;;) {
    if (limits.iterations > 0 && iterations_ - begun >= limits.iterations) break;
    const Clock::time_point now = limits.deadline ? Clock::now() : Clock::time_point{};
    if (limits.deadline && now >= *limits.deadline) break;
    if (best_cost_ < limits.stop_below) break;
    if (iterations_ % 256 == 0) {
      if (report) report(iterations_, best_cost_);
      marked = near_forbidden_nodes();
    }
    ++iterations_;
    // Half the moves go to near-forbidden costs while any remain, in larger trees: leaving one often
    // means re-choosing a long-lived node together with all its neighbours.
    if (!marked.empty() && rng_() % 2 == 0) {
      const int root = marked[rng_() % marked.size()];
      const bool moved = limits.region_every > 0 ? region_move(root, limits.region_nodes, limits.deadline)
                                                 : tree_move(root, large_tree(rng_));
      if (moved) keep_best();
      continue;
    }
    const int root = free_nodes_[pick(rng_)];
    const MoveKind kind = shares.pick(rng_);
    const WideCost before = current_cost_;
    const auto k = core_.nodes[static_cast<std::size_t>(root)].costs.size();
    bool moved = false;
    switch (kind) {
      case MoveKind::kTree: moved = tree_move(root, tree_size(rng_)); break;
      case MoveKind::kLargeTree: moved = tree_move(root, large_tree(rng_)); break;
      case MoveKind::kChain: moved = chain_move(root, static_cast<int>(rng_() % k), limits.chain_nodes); break;
      case MoveKind::kRegion: moved = region_move(root, limits.region_nodes, limits.deadline); break;
    }
    if (moved) keep_best();
    // Only timed searches adapt: per move, the costly region moves took a quarter of an iteration budget.
    if (limits.deadline)
      shares.record(kind, static_cast<double>(std::min(before - current_cost_, WideCost{kNearForbidden})),
                    std::max(1e-9, std::chrono::duration<double>(Clock::now() - now).count()));
  }
  keep_best();
}

}  // namespace loom::search
