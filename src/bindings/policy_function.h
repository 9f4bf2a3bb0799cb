// A policy written in Python: the job pipeline (api/job.h) with a Python function in the built-in
// policy's place. The engine loads the model, resolves the options (degrees as for megatron: any
// dp x tp x pp over the GPUs), hands the function the fresh plan (plan_object.h) and the resource, then
// validates, materializes, simulates and returns the job as for a built-in policy.
#pragma once

#include <pybind11/pybind11.h>

namespace loom::bindings {

// Registers Resource and plan_with_policy(policy, name, **keywords).
void bind_policy_function(pybind11::module_& module);

}  // namespace loom::bindings
