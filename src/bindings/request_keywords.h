// Python keywords into api::JobOptions through the engine's one keyword table (api/job_options.h): each
// value's Python type checked against its field's kind, then parsed by the same code as the CLI's flags.
#pragma once

#include <pybind11/pybind11.h>

#include "loom/api/job_options.h"

namespace loom::bindings {

// `graph` (the traced graph's JSON text) is the one keyword outside the table. None leaves a field at its
// default. Raises TypeError for an unknown keyword (naming the closest known one) or a value of the wrong
// type, and PlanError for a value the engine refuses.
api::JobOptions job_options(const pybind11::kwargs& keywords);

// Every keyword plan() takes, with its default and help: {keyword: (default text, help)}.
pybind11::dict keyword_table();

}  // namespace loom::bindings
