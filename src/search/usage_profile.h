// The live-usage profile of a choice, kept incrementally for the local search: the usage summed over
// the nodes live at each time point, with range updates and range maxima in O(log T). Only the nodes'
// start times are kept as points (a sum of intervals [start, end) peaks at some start).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "loom/search/sharding_problem.h"

namespace loom::search {

class UsageProfile {
 public:
  explicit UsageProfile(const ShardingProblem& problem);

  // Adds `delta` to the usage of every point in node i's interval.
  void add(int node, std::int64_t delta);
  // The largest usage over node i's interval (0 when it is empty).
  std::int64_t max_over(int node) const;
  // The largest usage over the points in [from, to) (nullopt when none lies there).
  std::optional<std::int64_t> max_between(std::int64_t from, std::int64_t to) const;
  std::int64_t peak() const { return tree_.empty() ? 0 : tree_[1]; }
  // A time point where the peak is reached (the earliest when several tie; 0 when there is none).
  std::int64_t peak_time() const;

 private:
  void add(std::size_t v, std::size_t lo, std::size_t hi, std::size_t a, std::size_t b, std::int64_t delta);
  std::int64_t max(std::size_t v, std::size_t lo, std::size_t hi, std::size_t a, std::size_t b) const;

  std::vector<std::int64_t> times_;       // the points' times, ascending
  std::size_t points_ = 0;
  std::vector<std::size_t> first_, last_;  // per node, its points [first, last)
  std::vector<std::int64_t> tree_;         // max of the subtree, including the pending adds below
  std::vector<std::int64_t> pending_;      // added to the whole subtree
};

}  // namespace loom::search
