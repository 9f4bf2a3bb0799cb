// The local search's adaptive move shares (sharding_local_search.h): which kind of move (tree, large
// tree, chain, region) to make next. Each kind starts at a prior share (the fixed shares the search used
// before: one move in 4 a chain move, one in 32 a region move); its share is then scaled by its recent
// gain per unit of effort (the local search records seconds, and only under a deadline, so an iteration
// budget keeps the priors and its determinism) against the mean of the kinds,
// within [1/8, 8] times the prior, so a kind that stops paying hands its budget to those that pay and
// every kind keeps being tried. Gains and efforts decay per move of the kind (a window of about 100 moves).
#pragma once

#include <array>
#include <cstddef>
#include <random>

namespace loom::search {

enum class MoveKind : std::size_t { kTree, kLargeTree, kChain, kRegion };
inline constexpr std::size_t kMoveKinds = 4;

class MoveShares {
 public:
  // Prior shares per kind; zero disables a kind. At least one must be positive.
  explicit MoveShares(const std::array<double, kMoveKinds>& priors);

  MoveKind pick(std::mt19937_64& rng) const;
  // A move of `kind` lowered the cost by `gain` (>= 0) for `effort` (> 0).
  void record(MoveKind kind, double gain, double effort);
  // The share of moves `kind` gets now.
  double share(MoveKind kind) const;

 private:
  std::array<double, kMoveKinds> priors_{};
  std::array<double, kMoveKinds> gains_{};
  std::array<double, kMoveKinds> efforts_{};
};

}  // namespace loom::search
