#include "calibration_model.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include <fmt/format.h>

#include "loom/core/strings.h"
#include "loom/sim/durations.h"
#include "loom/sim/simulator.h"

namespace loom::cli {

// Physical bounds (docs/calibration.md): the runtime's ops within a factor 3 of the profiler's timing of the
// same ops; an instruction's dispatch 1 to 200 µs of Python; γ from 0.1 (processes beyond the cores barely
// slow the others, as when most of them wait) to 1.5 (slower than a fair share: switching costs); gloo over
// loopback: a hop or a transfer 10 µs (a socket round trip) to 5 ms (a scheduler's time slice), 0.1 to
// 20 GB/s (at most a memory copy's rate); communication's γ 0.02 (it barely feels the sharing) to 2.
std::vector<cost::FitParameter> calibration_parameters(const cluster::Cluster& base) {
  constexpr double kAlphaLow = 1e-5, kAlphaHigh = 5e-3, kBetaLow = 1e8, kBetaHigh = 2e10;
  const double alpha = std::clamp(base.intra.latency, kAlphaLow, kAlphaHigh);
  const double beta = std::clamp(base.intra.bandwidth, kBetaLow, kBetaHigh);
  return {{"time_scale", 1.0 / 3, 3, 1},
          {"instruction_overhead", 1e-6, 2e-4, 2e-5},
          {"core_sharing", 0.1, 1.5, 1},
          {"alpha", kAlphaLow, kAlphaHigh, alpha},
          {"beta", kBetaLow, kBetaHigh, beta},
          {"p2p_alpha", kAlphaLow, kAlphaHigh, alpha},
          {"p2p_beta", kBetaLow, kBetaHigh, beta},
          {"comm_sharing", 0.02, 2, 0.5}};
}

Expected<void> fix_parameters(std::vector<cost::FitParameter>& parameters, const std::string& spec) {
  std::string names;
  for (const cost::FitParameter& p : parameters) names += (names.empty() ? "" : ", ") + p.name;
  for (const std::string& item : split(spec, ',')) {
    const std::size_t equals = item.find('=');
    const std::string name(trim(std::string_view(item).substr(0, equals)));
    auto it = std::ranges::find(parameters, name, &cost::FitParameter::name);
    if (equals == std::string::npos || it == parameters.end())
      return fail(fmt::format("option --fix: '{}' is not NAME=VALUE of a constant", item), "the constants: " + names);
    const std::string_view text = equals == std::string::npos ? "" : trim(std::string_view(item).substr(equals + 1));
    double value = 0;
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (error != std::errc{} || end != text.data() + text.size() || !(value > 0) || !std::isfinite(value))
      return fail(fmt::format("option --fix: {} is not a positive number", item), "give NAME=VALUE, VALUE > 0 in SI units");
    it->lower = it->upper = it->start = value;
  }
  return {};
}

cluster::Cluster calibrated_cluster(const cluster::Cluster& base, int cores, std::span<const double> constants) {
  cluster::Cluster c = base;
  c.shared = cluster::SharedCores{.cores = cores,
                                  .core_sharing = constants[2],
                                  .time_scale = constants[0],
                                  .instruction_overhead = constants[1],
                                  .comm_sharing = constants[7],
                                  .p2p_latency = constants[5],
                                  .p2p_bandwidth = constants[6]};
  c.intra.latency = c.inter.latency = constants[3];
  c.intra.bandwidth = c.inter.bandwidth = c.nic_bandwidth = constants[4];
  return c;
}

Expected<CalibrationModel> CalibrationModel::make(std::unique_ptr<api::Job> job) {
  LOOM_ASSIGN_OR_RETURN(cost::ComputeModel compute,
                        cost::ComputeModel::make(job->plan, job->catalog, job->cluster.gpu,
                                                 job->profile ? &*job->profile : nullptr));
  return CalibrationModel(std::move(job), std::make_unique<cost::ComputeModel>(std::move(compute)));
}

Expected<double> CalibrationModel::step_time(const cluster::Cluster& cluster) const {
  const exec::ExecPlan& exec = api::step_programs(*job_);
  LOOM_ASSIGN_OR_RETURN(sim::Durations durations,
                        sim::model_durations(exec, *compute_, cluster, {.contention = cluster.comm_contention}));
  LOOM_ASSIGN_OR_RETURN(sim::SimResult result, sim::simulate(exec, durations));
  return result.step_time;
}

}  // namespace loom::cli
