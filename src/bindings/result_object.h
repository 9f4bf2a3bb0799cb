// The Python face of api::Job (class PlanResult): the summary numbers, the rank programs in memory (emit) and the
// files `loom plan` writes.
#pragma once

#include <pybind11/pybind11.h>

namespace loom::bindings {

// Registers the class `PlanResult` in the module; its methods raise PlanError (raise.h).
void bind_plan_result(pybind11::module_& module);

}  // namespace loom::bindings
