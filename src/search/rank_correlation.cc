#include "loom/search/rank_correlation.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace loom::search {

std::vector<double> average_ranks(std::span<const double> values) {
  std::vector<std::size_t> order(values.size());
  std::iota(order.begin(), order.end(), 0);
  std::ranges::stable_sort(order, {}, [&](std::size_t i) { return values[i]; });
  std::vector<double> ranks(values.size());
  for (std::size_t at = 0; at < order.size();) {
    std::size_t end = at;
    while (end < order.size() && values[order[end]] == values[order[at]]) ++end;
    const double rank = (static_cast<double>(at + 1) + static_cast<double>(end)) / 2;  // mean of at+1 .. end
    for (std::size_t k = at; k < end; ++k) ranks[order[k]] = rank;
    at = end;
  }
  return ranks;
}

double spearman(std::span<const double> x, std::span<const double> y) {
  if (x.size() != y.size() || x.size() < 2) return 0;
  const std::vector<double> rx = average_ranks(x), ry = average_ranks(y);
  const double n = static_cast<double>(x.size());
  const double mean = (n + 1) / 2;
  double sxy = 0, sxx = 0, syy = 0;
  for (std::size_t i = 0; i < rx.size(); ++i) {
    sxy += (rx[i] - mean) * (ry[i] - mean);
    sxx += (rx[i] - mean) * (rx[i] - mean);
    syy += (ry[i] - mean) * (ry[i] - mean);
  }
  return sxx == 0 || syy == 0 ? 0 : sxy / std::sqrt(sxx * syy);
}

double kendall_tau_b(std::span<const double> x, std::span<const double> y) {
  if (x.size() != y.size() || x.size() < 2) return 0;
  double concordant = 0, discordant = 0, ties_x = 0, ties_y = 0;
  for (std::size_t i = 0; i < x.size(); ++i)
    for (std::size_t j = i + 1; j < x.size(); ++j) {
      const double dx = x[i] - x[j], dy = y[i] - y[j];
      if (dx == 0) ties_x += 1;
      if (dy == 0) ties_y += 1;
      if (dx == 0 || dy == 0) continue;
      (dx > 0) == (dy > 0) ? concordant += 1 : discordant += 1;
    }
  const double n = static_cast<double>(x.size());
  const double pairs = n * (n - 1) / 2;
  const double denominator = std::sqrt((pairs - ties_x) * (pairs - ties_y));
  return denominator == 0 ? 0 : (concordant - discordant) / denominator;
}

}  // namespace loom::search
