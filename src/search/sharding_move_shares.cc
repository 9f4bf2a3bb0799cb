#include "sharding_move_shares.h"

#include <algorithm>

namespace loom::search {
namespace {

constexpr double kDecay = 0.99;
constexpr double kMostScale = 8.0;
// A kind is judged by its own rate only after this much decayed effort in moves' worth; before, at its prior.
constexpr double kLeastEvidence = 1e-12;

}  // namespace

MoveShares::MoveShares(const std::array<double, kMoveKinds>& priors) : priors_(priors) {}

double MoveShares::share(MoveKind kind) const {
  std::array<double, kMoveKinds> rate{};
  double weighted = 0, prior_total = 0;
  for (std::size_t k = 0; k < kMoveKinds; ++k) {
    if (priors_[k] <= 0) continue;
    rate[k] = efforts_[k] > kLeastEvidence ? gains_[k] / efforts_[k] : 0;
    weighted += priors_[k] * rate[k];
    prior_total += priors_[k];
  }
  const double mean = prior_total > 0 ? weighted / prior_total : 0;
  std::array<double, kMoveKinds> weight{};
  double total = 0;
  for (std::size_t k = 0; k < kMoveKinds; ++k) {
    if (priors_[k] <= 0) continue;
    // Kinds without evidence, or all kinds when none pays, keep their prior.
    const double scale = mean > 0 && efforts_[k] > kLeastEvidence
                             ? std::clamp(rate[k] / mean, 1.0 / kMostScale, kMostScale)
                             : 1.0;
    weight[k] = priors_[k] * scale;
    total += weight[k];
  }
  return total > 0 ? weight[static_cast<std::size_t>(kind)] / total : 0;
}

MoveKind MoveShares::pick(std::mt19937_64& rng) const {
  const double x = std::uniform_real_distribution<double>(0, 1)(rng);
  double run = 0;
  std::size_t last = 0;
  for (std::size_t k = 0; k < kMoveKinds; ++k) {
    const double s = share(static_cast<MoveKind>(k));
    if (s <= 0) continue;
    last = k;
    run += s;
    if (x < run) return static_cast<MoveKind>(k);
  }
  return static_cast<MoveKind>(last);
}

void MoveShares::record(MoveKind kind, double gain, double effort) {
  const auto k = static_cast<std::size_t>(kind);
  gains_[k] = kDecay * gains_[k] + std::max(0.0, gain);
  efforts_[k] = kDecay * efforts_[k] + effort;
}

}  // namespace loom::search
