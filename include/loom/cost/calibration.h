// Fitting the cost model's free constants to measured step times (`loom calibrate`, docs/calibration.md),
// and the median its report gives (Spearman's correlation: search/rank_correlation.h).
//
// The fit is a least-squares problem in relative error: over constants θ within their bounds, minimise
//     Σ_i ( log(predict_i(θ) / measured_i) )²
// where predict is any function of θ (the simulator, for loom calibrate). The simulator is piecewise linear
// in its constants (the longest path changes with them), so the fit is Levenberg-Marquardt on the log of each
// constant with a forward-difference Jacobian, started from the given start and from each constant's bounds'
// geometric midpoint; the best end point is kept. Working in logs keeps constants that span decades
// (a latency of microseconds, a bandwidth of gigabytes per second) on one scale and positive.
#pragma once

#include <functional>
#include <span>
#include <string>
#include <vector>

#include "loom/core/error.h"

namespace loom::cost {

// One free constant: its name (in reports), bounds (0 < lower <= start <= upper) and start.
struct FitParameter {
  std::string name;
  double lower = 1e-9;
  double upper = 1;
  double start = 1e-3;
};

struct FitOptions {
  int max_iterations = 200;  // per start
  double tolerance = 1e-12;  // stop when the squared error improves by less than this (relative)
};

struct FitResult {
  std::vector<double> values;  // by parameter
  double rms_log_error = 0;    // sqrt(mean of the squared log ratios) at `values`
  int evaluations = 0;         // calls of predict
};

// predict(θ) returns one positive prediction per measurement. Fewer measurements than parameters leave
// some combination of them undetermined (the damping keeps the steps finite; the result is one of many
// exact fits). Errors: no parameters, no measurements, a non-positive measurement, bad bounds, a
// prediction that fails or is not positive and finite at the start.
using Predictor = std::function<Expected<std::vector<double>>(std::span<const double> values)>;
Expected<FitResult> fit_constants(std::span<const FitParameter> parameters, std::span<const double> measured,
                                  const Predictor& predict, FitOptions options = {});

// The median of `values` (the mean of the middle two for an even count); 0 for none.
double median(std::vector<double> values);

// (predicted - measured) / measured.
inline double relative_error(double predicted, double measured) { return (predicted - measured) / measured; }

}  // namespace loom::cost
