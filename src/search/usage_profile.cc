#include "usage_profile.h"

#include <algorithm>
#include <limits>

namespace loom::search {

UsageProfile::UsageProfile(const ShardingProblem& problem) {
  std::vector<std::int64_t> starts;
  for (const ShardingNode& n : problem.nodes)
    if (n.start < n.end) starts.push_back(n.start);
  std::sort(starts.begin(), starts.end());
  starts.erase(std::unique(starts.begin(), starts.end()), starts.end());
  points_ = starts.size();
  times_ = starts;
  first_.resize(problem.nodes.size());
  last_.resize(problem.nodes.size());
  for (std::size_t i = 0; i < problem.nodes.size(); ++i) {
    const ShardingNode& n = problem.nodes[i];
    first_[i] = static_cast<std::size_t>(std::lower_bound(starts.begin(), starts.end(), n.start) - starts.begin());
    last_[i] = static_cast<std::size_t>(std::lower_bound(starts.begin(), starts.end(), n.end) - starts.begin());
    if (n.start >= n.end) last_[i] = first_[i];
  }
  tree_.assign(points_ == 0 ? 0 : 4 * points_, 0);
  pending_.assign(tree_.size(), 0);
}

void UsageProfile::add(int node, std::int64_t delta) {
  const auto i = static_cast<std::size_t>(node);
  if (delta == 0 || first_[i] >= last_[i]) return;
  add(1, 0, points_, first_[i], last_[i], delta);
}

std::int64_t UsageProfile::max_over(int node) const {
  const auto i = static_cast<std::size_t>(node);
  if (first_[i] >= last_[i]) return 0;
  return max(1, 0, points_, first_[i], last_[i]);
}

std::optional<std::int64_t> UsageProfile::max_between(std::int64_t from, std::int64_t to) const {
  const auto a = static_cast<std::size_t>(std::lower_bound(times_.begin(), times_.end(), from) - times_.begin());
  const auto b = static_cast<std::size_t>(std::lower_bound(times_.begin(), times_.end(), to) - times_.begin());
  if (a >= b) return std::nullopt;
  return max(1, 0, points_, a, b);
}

std::int64_t UsageProfile::peak_time() const {
  if (points_ == 0) return 0;
  std::size_t v = 1, lo = 0, hi = points_;
  while (hi - lo > 1) {  // a subtree's pending add is common to both children, so compare them directly
    const std::size_t mid = (lo + hi) / 2;
    if (tree_[2 * v] >= tree_[2 * v + 1]) {
      v = 2 * v;
      hi = mid;
    } else {
      v = 2 * v + 1;
      lo = mid;
    }
  }
  return times_[lo];
}

void UsageProfile::add(std::size_t v, std::size_t lo, std::size_t hi, std::size_t a, std::size_t b,
                       std::int64_t delta) {
  if (b <= lo || hi <= a) return;
  if (a <= lo && hi <= b) {
    tree_[v] += delta;
    pending_[v] += delta;
    return;
  }
  const std::size_t mid = (lo + hi) / 2;
  add(2 * v, lo, mid, a, b, delta);
  add(2 * v + 1, mid, hi, a, b, delta);
  tree_[v] = std::max(tree_[2 * v], tree_[2 * v + 1]) + pending_[v];
}

std::int64_t UsageProfile::max(std::size_t v, std::size_t lo, std::size_t hi, std::size_t a, std::size_t b) const {
  if (a <= lo && hi <= b) return tree_[v];
  const std::size_t mid = (lo + hi) / 2;
  std::int64_t best = std::numeric_limits<std::int64_t>::min();
  if (a < mid) best = std::max(best, max(2 * v, lo, mid, a, b));
  if (mid < b) best = std::max(best, max(2 * v + 1, mid, hi, a, b));
  return best + pending_[v];
}

}  // namespace loom::search
