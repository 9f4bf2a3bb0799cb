#include "calibration_model.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include <fmt/format.h>

#include "loom/core/strings.h"
#include "loom/sim/durations.h"
#include "loom/sim/shared_cores.h"
#include "loom/sim/simulator.h"

namespace loom::cli {

// Physical bounds (docs/calibration.md): the runtime's ops within a factor 3 of the profiler's timing of the
// same ops; an instruction's dispatch 1 to 200 µs of Python; γ from 0.1 (processes beyond the cores barely
// slow the others, as when most of them wait) to 1.5 (slower than a fair share: switching costs); gloo over
// loopback: a hop or a transfer 10 µs (a socket round trip) to 5 ms (a scheduler's time slice), 0.1 to
// 20 GB/s (at most a memory copy's rate); communication's γ 0.02 (it barely feels the sharing) to 2; a
// collective's overhead 1 µs to 5 ms (a scheduler's time slice, as a latency).
constexpr double kAlphaLow = 1e-5, kAlphaHigh = 5e-3, kBetaLow = 1e8, kBetaHigh = 2e10;
constexpr double kAlphaFloor = 1e-6;  // a measured latency's least: a microsecond
std::vector<cost::FitParameter> calibration_parameters(const cluster::Cluster& base) {
  const double alpha = std::clamp(base.intra.latency, kAlphaLow, kAlphaHigh);
  const double beta = std::clamp(base.intra.bandwidth, kBetaLow, kBetaHigh);
  return {{"time_scale", 1.0 / 3, 3, 1},
          {"instruction_overhead", 1e-6, 2e-4, 2e-5},
          {"core_sharing", 0.1, 1.5, 1},
          {"alpha", kAlphaLow, kAlphaHigh, alpha},
          {"beta", kBetaLow, kBetaHigh, beta},
          {"p2p_alpha", kAlphaLow, kAlphaHigh, alpha},
          {"p2p_beta", kBetaLow, kBetaHigh, beta},
          {"comm_sharing", 0.02, 2, 0.5},
          {"collective_overhead", 1e-6, 5e-3, 2e-4}};
}

std::vector<std::string> pin_links(std::vector<cost::FitParameter>& parameters,
                                   const std::map<std::string, LinkFit>& links) {
  std::vector<std::string> pinned;
  const auto pin = [&](const std::string& name, double value) {
    auto it = std::ranges::find(parameters, name, &cost::FitParameter::name);
    if (it == parameters.end()) it = parameters.insert(parameters.end(), cost::FitParameter{name, value, value, value});
    it->lower = it->upper = it->start = value;
    pinned.push_back(name);
  };
  for (const auto& [kind, link] : links) {
    const std::string prefix = kind == "all_reduce" ? "" : kind + "_";
    if (kind != "all_reduce" && kind != "p2p" && kind != "all_gather" && kind != "reduce_scatter") continue;
    // A fitted α of 0 (the sizes' times lie on a line through the launch alone) is a latency below any hop's.
    pin(prefix + "alpha", std::max(link.alpha, kAlphaFloor));
    pin(prefix + "beta", link.beta);
  }
  return pinned;
}

Expected<void> fix_parameters(std::vector<cost::FitParameter>& parameters, const std::string& spec) {
  // The kinds' own links are constants only where measured (pin_links) or given here.
  constexpr std::string_view kKindLinks[] = {"all_gather_alpha", "all_gather_beta", "reduce_scatter_alpha",
                                             "reduce_scatter_beta"};
  std::string names;
  for (const cost::FitParameter& p : parameters) names += (names.empty() ? "" : ", ") + p.name;
  for (std::string_view k : kKindLinks)
    if (std::ranges::find(parameters, k, &cost::FitParameter::name) == parameters.end()) names += fmt::format(", {}", k);
  for (const std::string& item : split(spec, ',')) {
    const std::size_t equals = item.find('=');
    const std::string name(trim(std::string_view(item).substr(0, equals)));
    auto it = std::ranges::find(parameters, name, &cost::FitParameter::name);
    if (equals != std::string::npos && it == parameters.end() && std::ranges::find(kKindLinks, name) != std::end(kKindLinks))
      it = parameters.insert(parameters.end(), cost::FitParameter{name, 1, 1, 1});
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

cluster::Cluster calibrated_cluster(const cluster::Cluster& base, int cores,
                                    std::span<const cost::FitParameter> parameters, std::span<const double> values) {
  const auto value = [&](std::string_view name) {
    for (std::size_t k = 0; k < parameters.size() && k < values.size(); ++k)
      if (parameters[k].name == name) return values[k];
    return 0.0;
  };
  cluster::Cluster c = base;
  c.shared = cluster::SharedCores{.cores = cores,
                                  .core_sharing = value("core_sharing"),
                                  .time_scale = value("time_scale"),
                                  .instruction_overhead = value("instruction_overhead"),
                                  .comm_sharing = value("comm_sharing"),
                                  .p2p_latency = value("p2p_alpha"),
                                  .p2p_bandwidth = value("p2p_beta"),
                                  .all_gather_latency = value("all_gather_alpha"),
                                  .all_gather_bandwidth = value("all_gather_beta"),
                                  .reduce_scatter_latency = value("reduce_scatter_alpha"),
                                  .reduce_scatter_bandwidth = value("reduce_scatter_beta"),
                                  .collective_overhead = value("collective_overhead")};
  c.intra.latency = c.inter.latency = value("alpha");
  c.intra.bandwidth = c.inter.bandwidth = c.nic_bandwidth = value("beta");
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
  LOOM_ASSIGN_OR_RETURN(const sim::SimResult result,
                        sim::simulate_sharing_cores(exec, *compute_, cluster, {.contention = cluster.comm_contention},
                                                    [&](const sim::Durations& d) { return sim::simulate(exec, d); }));
  return result.step_time;
}

}  // namespace loom::cli
