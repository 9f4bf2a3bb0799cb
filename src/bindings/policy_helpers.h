// The plan helpers the built-in policies compose (plan/batch.h, plan/micro_batches.h, plan/schedule.h,
// policy/tensor_parallel.h, policy/stages.h, policy/policy.h, policy/recompute_policy.h), for policies
// written in Python: each is the engine's function, called on the policy's Plan (plan_object.h).
#pragma once

#include <pybind11/pybind11.h>

namespace loom::bindings {

// Registers Config (policy::ParallelConfig, read-only), Block, TensorParallelLayout and the helper functions.
void bind_policy_helpers(pybind11::module_& module);

}  // namespace loom::bindings
