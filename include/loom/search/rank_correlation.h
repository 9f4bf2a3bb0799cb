// How well one ranking agrees with another (the analytic costing's against the full path's,
// bench/bench_auto_rank.cc and the search tests):
//   Spearman's rho   the Pearson correlation of the two samples' ranks (ties: their average rank);
//   Kendall's tau-b  (concordant - discordant pairs) / sqrt((n0 - ties in x)(n0 - ties in y)), n0 = n(n-1)/2.
// Both lie in [-1, 1]: 1 the same order, -1 the reverse. Defined for two samples of equal size n >= 2
// that are not constant; otherwise 0.
#pragma once

#include <span>
#include <vector>

namespace loom::search {

// Ranks from 1, ties given the average of the ranks they span.
std::vector<double> average_ranks(std::span<const double> values);

double spearman(std::span<const double> x, std::span<const double> y);
double kendall_tau_b(std::span<const double> x, std::span<const double> y);

}  // namespace loom::search
