// The proof stage of a job (`loom verify`): the materialized ExecPlan run on simulated devices with the
// float64 reference kernels, compared with the single-device run of the job's training graph; the
// parameters and optimizer states each device ends with must be where the next step loads them.
#pragma once

#include <algorithm>
#include <cstdint>

#include "loom/api/job.h"
#include "loom/core/error.h"
#include "loom/verify/closed_step.h"
#include "loom/verify/graph_interpreter.h"
#include "loom/verify/plan_interpreter.h"

namespace loom::api {

struct VerifyReport {
  verify::RunComparison comparison;  // every activation, gradient, updated parameter and the loss
  verify::ClosedStep closed;         // the step's end against the next step's loads
  double worst() const { return std::max(comparison.overall.max_rel, closed.error.max_rel); }
};

// Needs a materialized, unfolded job. `seed` draws the initial values.
Expected<VerifyReport> verify_job(const Job& job, std::uint64_t seed);

}  // namespace loom::api
