#include "calibration_model.h"

#include <algorithm>

#include "loom/sim/durations.h"
#include "loom/sim/simulator.h"

namespace loom::cli {

std::vector<cost::FitParameter> calibration_parameters(const cluster::Cluster& base) {
  const double alpha = std::clamp(base.intra.latency, 1e-6, 1e-2), beta = std::clamp(base.intra.bandwidth, 1e7, 1e11);
  return {{"time_scale", 0.05, 20, 1},
          {"instruction_overhead", 1e-7, 1e-2, 2e-5},
          {"core_sharing", 1e-3, 5, 1},
          {"alpha", 1e-7, 0.1, alpha},
          {"beta", 1e6, 1e12, beta}};
}

cluster::Cluster calibrated_cluster(const cluster::Cluster& base, int cores, std::span<const double> constants) {
  cluster::Cluster c = base;
  c.shared = cluster::SharedCores{.cores = cores,
                                  .core_sharing = constants[2],
                                  .time_scale = constants[0],
                                  .instruction_overhead = constants[1]};
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
