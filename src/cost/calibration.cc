#include "loom/cost/calibration.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include <fmt/format.h>

namespace loom::cost {
namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

// The problem in log space: x = log θ, each within [log lower, log upper].
class LogProblem {
 public:
  LogProblem(std::span<const FitParameter> parameters, std::span<const double> measured, const Predictor& predict)
      : parameters_(parameters), measured_(measured), predict_(predict) {}

  std::size_t size() const { return parameters_.size(); }
  double low(std::size_t k) const { return std::log(parameters_[k].lower); }
  double high(std::size_t k) const { return std::log(parameters_[k].upper); }
  std::vector<double> clamped(std::vector<double> x) const {
    for (std::size_t k = 0; k < x.size(); ++k) x[k] = std::clamp(x[k], low(k), high(k));
    return x;
  }

  // log(predicted / measured) per measurement; empty when predict fails or gives a non-positive value.
  std::vector<double> residuals(std::span<const double> x) {
    std::vector<double> values(x.size());
    std::transform(x.begin(), x.end(), values.begin(), [](double v) { return std::exp(v); });
    ++evaluations;
    Expected<std::vector<double>> predicted = predict_(values);
    if (!predicted || predicted->size() != measured_.size()) return {};
    std::vector<double> r(measured_.size());
    for (std::size_t i = 0; i < r.size(); ++i) {
      const double p = (*predicted)[i];
      if (!(p > 0) || !std::isfinite(p)) return {};
      r[i] = std::log(p / measured_[i]);
    }
    return r;
  }

  int evaluations = 0;

 private:
  std::span<const FitParameter> parameters_;
  std::span<const double> measured_;
  const Predictor& predict_;
};

double squared(std::span<const double> r) {
  return r.empty() ? kInfinity : std::inner_product(r.begin(), r.end(), r.begin(), 0.0);
}

// Solves A d = b for a small dense symmetric positive definite A (Gaussian elimination, partial pivoting);
// false when singular.
bool solve(std::vector<std::vector<double>> a, std::vector<double> b, std::vector<double>& d) {
  const std::size_t n = b.size();
  for (std::size_t c = 0; c < n; ++c) {
    std::size_t pivot = c;
    for (std::size_t r = c + 1; r < n; ++r)
      if (std::abs(a[r][c]) > std::abs(a[pivot][c])) pivot = r;
    if (std::abs(a[pivot][c]) < 1e-300) return false;
    std::swap(a[c], a[pivot]);
    std::swap(b[c], b[pivot]);
    for (std::size_t r = c + 1; r < n; ++r) {
      const double f = a[r][c] / a[c][c];
      for (std::size_t k = c; k < n; ++k) a[r][k] -= f * a[c][k];
      b[r] -= f * b[c];
    }
  }
  d.assign(n, 0);
  for (std::size_t c = n; c-- > 0;) {
    double s = b[c];
    for (std::size_t k = c + 1; k < n; ++k) s -= a[c][k] * d[k];
    d[c] = s / a[c][c];
  }
  return true;
}

// Levenberg-Marquardt from x (clamped to the bounds after every step); returns the end point and its cost.
std::pair<std::vector<double>, double> descend(LogProblem& problem, std::vector<double> x, const FitOptions& options) {
  std::vector<double> r = problem.residuals(x);
  double cost = squared(r);
  if (!std::isfinite(cost)) return {x, cost};
  const std::size_t n = problem.size(), m = r.size();
  double lambda = 1e-3;
  for (int iteration = 0; iteration < options.max_iterations && cost > 0; ++iteration) {
    // Forward differences, backward at an upper bound.
    std::vector<std::vector<double>> jacobian(m, std::vector<double>(n, 0));
    for (std::size_t k = 0; k < n; ++k) {
      const double h = x[k] + 1e-6 > problem.high(k) ? -1e-6 : 1e-6;
      std::vector<double> moved = x;
      moved[k] += h;
      const std::vector<double> rk = problem.residuals(moved);
      if (rk.empty()) continue;
      for (std::size_t i = 0; i < m; ++i) jacobian[i][k] = (rk[i] - r[i]) / h;
    }
    std::vector<std::vector<double>> jtj(n, std::vector<double>(n, 0));
    std::vector<double> jtr(n, 0);
    for (std::size_t i = 0; i < m; ++i)
      for (std::size_t a = 0; a < n; ++a) {
        jtr[a] -= jacobian[i][a] * r[i];
        for (std::size_t b = 0; b < n; ++b) jtj[a][b] += jacobian[i][a] * jacobian[i][b];
      }
    bool improved = false;
    while (lambda < 1e12) {
      std::vector<std::vector<double>> damped = jtj;
      for (std::size_t a = 0; a < n; ++a) damped[a][a] += lambda * std::max(jtj[a][a], 1e-12);
      std::vector<double> step;
      if (solve(damped, jtr, step)) {
        std::vector<double> next = x;
        for (std::size_t a = 0; a < n; ++a) next[a] += step[a];
        next = problem.clamped(std::move(next));
        std::vector<double> rn = problem.residuals(next);
        const double next_cost = squared(rn);
        if (next_cost < cost) {
          const double gain = (cost - next_cost) / std::max(cost, 1e-300);
          x = std::move(next);
          r = std::move(rn);
          cost = next_cost;
          lambda = std::max(lambda / 3, 1e-12);
          improved = gain > options.tolerance;
          break;
        }
      }
      lambda *= 4;
    }
    if (!improved) break;
  }
  return {x, cost};
}

}  // namespace

Expected<FitResult> fit_constants(std::span<const FitParameter> parameters, std::span<const double> measured,
                                  const Predictor& predict, FitOptions options) {
  if (parameters.empty()) return fail("no constants to fit", "name at least one free constant");
  if (measured.empty()) return fail("no measurements to fit", "fit on at least one measured time");
  for (double t : measured)
    if (!(t > 0) || !std::isfinite(t))
      return fail(fmt::format("a measured time of {}", t), "measured times are positive seconds");
  for (const FitParameter& p : parameters)
    if (!(p.lower > 0) || !(p.lower <= p.start) || !(p.start <= p.upper) || !std::isfinite(p.upper))
      return fail(fmt::format("constant {}: bounds {} <= {} <= {} are not positive and ordered", p.name, p.lower,
                              p.start, p.upper),
                  "give 0 < lower <= start <= upper");
  LogProblem problem(parameters, measured, predict);
  std::vector<double> start(parameters.size()), middle(parameters.size()), quarter(parameters.size());
  for (std::size_t k = 0; k < parameters.size(); ++k) {
    start[k] = std::log(parameters[k].start);
    middle[k] = (problem.low(k) + problem.high(k)) / 2;
    quarter[k] = (3 * problem.low(k) + problem.high(k)) / 4;
  }
  if (problem.residuals(start).empty())
    return fail("the prediction fails or is not a positive time at the constants' start values",
                "check the plans price at all with these constants");
  std::vector<double> best;
  double best_cost = kInfinity;
  for (const std::vector<double>& from : {start, middle, quarter}) {
    auto [x, cost] = descend(problem, from, options);
    if (cost < best_cost) {
      best = std::move(x);
      best_cost = cost;
    }
  }
  FitResult result;
  result.values.resize(best.size());
  std::transform(best.begin(), best.end(), result.values.begin(), [](double v) { return std::exp(v); });
  result.rms_log_error = std::sqrt(best_cost / static_cast<double>(measured.size()));
  result.evaluations = problem.evaluations;
  return result;
}

double median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

}  // namespace loom::cost
