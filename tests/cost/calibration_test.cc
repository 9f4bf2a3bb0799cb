// The constants' fit (fit_constants) recovers known constants from synthetic step times; the median.
#include "loom/cost/calibration.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

namespace loom::cost {
namespace {

// A plan as the calibration's model sees it: what each constant multiplies.
struct SyntheticPlan {
  double compute = 0;       // seconds of modelled compute (times time_scale)
  double instructions = 0;  // times instruction_overhead
  double messages = 0;      // times α
  double bytes = 0;         // over β
  double other_path = 0;    // a second path of compute the step waits for (the max makes it piecewise linear)
  int processes = 1;
};

// θ = (time_scale, instruction_overhead, core_sharing, α, β); 2 cores, as the calibration's SharedCores.
double step(const SyntheticPlan& p, std::span<const double> v) {
  const double slowdown = p.processes > 2 ? 1 + v[2] * (p.processes - 2) / 2.0 : 1;
  const double compute = slowdown * (v[0] * p.compute + v[1] * p.instructions);
  return std::max(compute, slowdown * v[0] * p.other_path) + v[3] * p.messages + p.bytes / v[4];
}

const std::vector<FitParameter> kParameters = {{"time_scale", 0.05, 20, 1},
                                               {"instruction_overhead", 1e-7, 1e-2, 1e-5},
                                               {"core_sharing", 1e-3, 5, 1},
                                               {"alpha", 1e-7, 1e-1, 1e-4},
                                               {"beta", 1e6, 1e12, 1e9}};

TEST(FitConstants, RecoversRandomConstantsFromExactTimes) {
  std::mt19937 rng(17);
  std::uniform_real_distribution<double> unit(0, 1);
  auto log_uniform = [&](double lo, double hi) { return std::exp(std::log(lo) + unit(rng) * std::log(hi / lo)); };
  for (int round = 0; round < 20; ++round) {
    const std::vector<double> truth = {0.5 + 1.5 * unit(rng), log_uniform(1e-6, 1e-4), 0.3 + 1.2 * unit(rng),
                                       log_uniform(1e-5, 1e-3), log_uniform(1e8, 1e10)};
    // Each term worth 0-50 ms of each plan, so every constant shows in the times.
    std::vector<SyntheticPlan> plans(14);
    for (std::size_t i = 0; i < plans.size(); ++i) {
      SyntheticPlan& p = plans[i];
      p.processes = 1 + static_cast<int>(i % 4);
      p.compute = 0.05 * unit(rng) / truth[0];
      p.instructions = 0.05 * unit(rng) / truth[1];
      p.other_path = i % 3 == 0 ? 1.2 * p.compute : 0;
      p.messages = p.processes > 1 ? 0.05 * unit(rng) / truth[3] : 0;
      p.bytes = p.processes > 1 ? 0.05 * unit(rng) * truth[4] : 0;
    }
    std::vector<double> measured;
    for (const SyntheticPlan& p : plans) measured.push_back(step(p, truth));
    const Predictor predict = [&](std::span<const double> v) -> Expected<std::vector<double>> {
      std::vector<double> out;
      for (const SyntheticPlan& p : plans) out.push_back(step(p, v));
      return out;
    };
    Expected<FitResult> fit = fit_constants(kParameters, measured, predict);
    ASSERT_TRUE(fit) << fit.error().message;
    EXPECT_LT(fit->rms_log_error, 1e-4) << "round " << round;
    for (std::size_t k = 0; k < truth.size(); ++k)
      EXPECT_NEAR(fit->values[k] / truth[k], 1, 0.01) << kParameters[k].name << ", round " << round;
  }
}

// The calibration's eight constants (src/cli/calibration_model.cc): the collectives' α-β, the transfers' own
// α-β and communication's γ recovered apart from times of plans that have collectives only (data and tensor
// parallel), transfers only (pipelines) or both, within the physical bounds loom calibrate gives them.
// θ = (time_scale, instruction_overhead, core_sharing, α, β, p2p α, p2p β, comm_sharing).
double step_with_transfers(const SyntheticPlan& p, double transfers, double transfer_bytes, std::span<const double> v) {
  const double slowdown = p.processes > 2 ? 1 + v[2] * (p.processes - 2) / 2.0 : 1;
  const double comm = p.processes > 2 ? 1 + v[7] * (p.processes - 2) / 2.0 : 1;
  const double compute = slowdown * (v[0] * p.compute + v[1] * p.instructions);
  return std::max(compute, slowdown * v[0] * p.other_path) +
         comm * (v[3] * p.messages + p.bytes / v[4] + v[5] * transfers + transfer_bytes / v[6]);
}

TEST(FitConstants, RecoversCollectiveAndTransferLinksApart) {
  const std::vector<FitParameter> parameters = {{"time_scale", 1.0 / 3, 3, 1},      {"instruction_overhead", 1e-6, 2e-4, 2e-5},
                                                {"core_sharing", 0.1, 1.5, 1},      {"alpha", 1e-5, 5e-3, 1.3e-3},
                                                {"beta", 1e8, 2e10, 1.07e9},        {"p2p_alpha", 1e-5, 5e-3, 1.3e-3},
                                                {"p2p_beta", 1e8, 2e10, 1.07e9},    {"comm_sharing", 0.02, 2, 0.5}};
  std::mt19937 rng(29);
  std::uniform_real_distribution<double> unit(0, 1);
  auto log_uniform = [&](double lo, double hi) { return std::exp(std::log(lo) + unit(rng) * std::log(hi / lo)); };
  for (int round = 0; round < 20; ++round) {
    const std::vector<double> truth = {0.6 + 1.2 * unit(rng),     log_uniform(3e-6, 1e-4), 0.3 + 1.0 * unit(rng),
                                       log_uniform(3e-5, 2e-3),   log_uniform(3e8, 1e10),  log_uniform(3e-5, 2e-3),
                                       log_uniform(3e8, 1e10),    0.1 + 1.5 * unit(rng)};
    // Sixteen plans: a third pipelines (transfers, no collectives), the rest
    // collectives, one plan with both; each term 0-50 ms.
    struct Plan {
      SyntheticPlan base;
      double transfers = 0, transfer_bytes = 0;
    };
    std::vector<Plan> plans(16);
    for (std::size_t i = 0; i < plans.size(); ++i) {
      Plan& p = plans[i];
      p.base.processes = 1 + static_cast<int>(i % 4);
      p.base.compute = 0.05 * unit(rng) / truth[0];
      p.base.instructions = 0.05 * unit(rng) / truth[1];
      p.base.other_path = i % 3 == 0 ? 1.2 * p.base.compute : 0;
      const bool pipeline = i % 3 == 1 && p.base.processes > 1, collectives = i % 3 != 1 || i == 1;
      if (pipeline) {
        p.transfers = 0.05 * unit(rng) / truth[5];
        p.transfer_bytes = 0.05 * unit(rng) * truth[6];
      }
      if (collectives && p.base.processes > 1) {
        p.base.messages = 0.05 * unit(rng) / truth[3];
        p.base.bytes = 0.05 * unit(rng) * truth[4];
      }
    }
    auto times = [&](std::span<const double> v) {
      std::vector<double> out;
      for (const Plan& p : plans) out.push_back(step_with_transfers(p.base, p.transfers, p.transfer_bytes, v));
      return out;
    };
    const std::vector<double> measured = times(truth);
    const Predictor predict = [&](std::span<const double> v) -> Expected<std::vector<double>> { return times(v); };
    Expected<FitResult> fit = fit_constants(parameters, measured, predict);
    ASSERT_TRUE(fit) << fit.error().message;
    EXPECT_LT(fit->rms_log_error, 1e-4) << "round " << round;
    for (std::size_t k = 0; k < truth.size(); ++k)
      EXPECT_NEAR(fit->values[k] / truth[k], 1, 0.01) << parameters[k].name << ", round " << round;
  }
}

TEST(FitConstants, StaysWithinBounds) {
  // Times that want a time_scale of 100 get the upper bound 20.
  const std::vector<FitParameter> scale = {{"time_scale", 0.05, 20, 1}};
  const std::vector<double> measured = {1, 2, 3};
  const Predictor predict = [](std::span<const double> v) -> Expected<std::vector<double>> {
    return std::vector<double>{0.01 * v[0], 0.02 * v[0], 0.03 * v[0]};
  };
  Expected<FitResult> fit = fit_constants(scale, measured, predict);
  ASSERT_TRUE(fit);
  EXPECT_NEAR(fit->values[0], 20, 1e-9);
  EXPECT_NEAR(fit->rms_log_error, std::log(5.0), 1e-9);
}

TEST(FitConstants, RefusesBadInput) {
  const Predictor ones = [](std::span<const double>) -> Expected<std::vector<double>> {
    return std::vector<double>{1, 1};
  };
  const std::vector<FitParameter> one = {{"x", 1e-3, 10, 1}};
  EXPECT_FALSE(fit_constants({}, std::vector<double>{1, 1}, ones));
  EXPECT_FALSE(fit_constants(one, std::vector<double>{}, ones));               // no times
  EXPECT_FALSE(fit_constants(one, std::vector<double>{1, 0}, ones));         // a non-positive time
  EXPECT_FALSE(fit_constants(std::vector<FitParameter>{{"x", 10, 1, 5}}, std::vector<double>{1, 1}, ones));
  const Predictor failing = [](std::span<const double>) -> Expected<std::vector<double>> {
    return fail("cannot price");
  };
  Expected<FitResult> fit = fit_constants(one, std::vector<double>{1, 1}, failing);
  ASSERT_FALSE(fit);
  EXPECT_NE(fit.error().message.find("start values"), std::string::npos);
}

TEST(Median, OddEvenAndEmpty) {
  EXPECT_EQ(median({3, 1, 2}), 2);
  EXPECT_EQ(median({4, 1, 3, 2}), 2.5);
  EXPECT_EQ(median({}), 0);
}

}  // namespace
}  // namespace loom::cost
