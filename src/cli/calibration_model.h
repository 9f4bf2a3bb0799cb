// The cost model `loom calibrate` fits: the simulator on each plan's ExecPlan, with the free constants
// set into the cluster (cluster::SharedCores and the link's α, β), so the fitted cluster file predicts
// with `loom plan --cluster FILE` what the calibration printed.
#pragma once

#include <map>
#include <memory>
#include <span>
#include <vector>

#include "loom/api/job.h"
#include "loom/cluster/cluster.h"
#include "loom/core/error.h"
#include "loom/cost/calibration.h"
#include "loom/cost/compute_model.h"
#include "calibration_runs.h"

namespace loom::cli {

// The free constants: time_scale, instruction_overhead, core_sharing, alpha, beta (the collectives' link),
// p2p_alpha, p2p_beta (point-to-point transfers), comm_sharing (communication's slowdown under the cores'
// sharing), collective_overhead (seconds each collective adds beyond its link); physical bounds, α and β
// starting from `base`'s link.
std::vector<cost::FitParameter> calibration_parameters(const cluster::Cluster& base);

// Pins the constants of each kind of link measured apart (PlanRuns::links: all_reduce gives alpha and beta,
// p2p p2p_alpha and p2p_beta, all_gather and reduce_scatter their own, added to `parameters`) at the
// measured values, so the fit moves only the others; returns the names pinned. Unknown kinds are skipped.
std::vector<std::string> pin_links(std::vector<cost::FitParameter>& parameters,
                                   const std::map<std::string, LinkFit>& links);

// Pins constants at given values (`--fix time_scale=1,comm_sharing=0.02`): each one's bounds and start
// become the value, so the fit moves only the others. Errors: an unknown name, a value that is not a
// positive number.
Expected<void> fix_parameters(std::vector<cost::FitParameter>& parameters, const std::string& spec);

// `base` with the constants (values[k] of parameters[k], by name) set: one link tier (intra and inter) of
// latency alpha and bandwidth beta for the collectives, the processes sharing `cores` cores, and the
// transfers', all-gathers' and reduce-scatters' own α-β where given (else the link's).
cluster::Cluster calibrated_cluster(const cluster::Cluster& base, int cores,
                                    std::span<const cost::FitParameter> parameters, std::span<const double> values);

// A planned job and its compute model, priced again under other constants.
class CalibrationModel {
 public:
  // The job must be simulated and unfolded.
  static Expected<CalibrationModel> make(std::unique_ptr<api::Job> job);

  // The simulated step of the plan on `cluster` (the job's cluster with other constants).
  Expected<double> step_time(const cluster::Cluster& cluster) const;
  const api::Job& job() const { return *job_; }

 private:
  CalibrationModel(std::unique_ptr<api::Job> job, std::unique_ptr<cost::ComputeModel> compute)
      : job_(std::move(job)), compute_(std::move(compute)) {}
  std::unique_ptr<api::Job> job_;
  std::unique_ptr<cost::ComputeModel> compute_;
};

}  // namespace loom::cli
