// Disjoint sets over the indices [0, n) (union-find with path halving): which elements the unions so far
// have joined. Callers that number other things (devices, pieces) map them to indices first.
#pragma once

#include <cstddef>
#include <numeric>
#include <vector>

namespace loom {

class DisjointSets {
 public:
  explicit DisjointSets(std::size_t n) : parent_(n) { std::iota(parent_.begin(), parent_.end(), std::size_t{0}); }

  std::size_t size() const { return parent_.size(); }

  // The representative of x's set: equal for two elements exactly when they are in one set.
  std::size_t find(std::size_t x) {
    while (parent_[x] != x) x = parent_[x] = parent_[parent_[x]];
    return x;
  }

  // Joins x's set and y's; the union's representative is y's, so the representatives (and any order
  // kept by them) depend only on the sequence of unions, not on how the paths were shortened.
  void unite(std::size_t x, std::size_t y) { parent_[find(x)] = find(y); }

 private:
  std::vector<std::size_t> parent_;
};

}  // namespace loom
