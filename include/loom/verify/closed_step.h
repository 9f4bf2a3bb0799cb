// Step closing, checked on a run of an ExecPlan (plan/residence.h): every piece of a parameter or
// optimizer state a device loads at the step's start must end the step on that device, as a buffer of the
// tensor's updated version that is never freed, holding what the single-device step computes. Then the
// ExecPlan can run again from its own end: step n + 1 loads exactly what step n left.
#pragma once

#include <cstddef>
#include <vector>

#include "loom/core/error.h"
#include "loom/exec/exec_plan.h"
#include "loom/verify/exec_interpreter.h"
#include "loom/verify/plan_interpreter.h"

namespace loom::verify {

struct ClosedStep {
  std::size_t pieces = 0;  // loaded pieces of tensors an optimizer step updates, each found closed
  ErrorStat error;         // their end-of-step values against `reference` (tensor-wise, as compare_runs)
};

// `run`: run_exec_plan's result for `exec`; `reference`: run_graph's values of the same graph. Errors
// name the device, the loaded piece and the tensor whose updated version it lacks at the end.
Expected<ClosedStep> check_closed_step(const exec::ExecPlan& exec, const ExecRun& run,
                                       const std::vector<NdArray>& reference, double floor = 1e-6);

}  // namespace loom::verify
