// `_loom_engine`: the api's job pipeline in Python (python/loom/api.py wraps it; docs/python_api.md).
// plan(**keywords) takes the engine's job options by their keywords (api/job_options.h, the table the
// CLI's flags come from; keywords() lists them with their defaults), runs api::plan_or_search, and returns
// the job as a PlanResult; engine errors raise PlanError with the engine's message and hint. No planning
// logic lives here. Policies written in Python (plan_with_policy) get the plan's primitives and the built-in
// policies' helpers (plan_object.h, policy_helpers.h, policy_function.h).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "loom/api/baseline_search.h"
#include "plan_object.h"
#include "policy_function.h"
#include "policy_helpers.h"
#include "raise.h"
#include "request_keywords.h"
#include "result_object.h"

namespace py = pybind11;

namespace loom::bindings {

void bind_module(py::module_& m) {
  py::register_exception<PlanFailure>(m, "PlanError", PyExc_RuntimeError);
  bind_plan_result(m);
  bind_plan(m);
  bind_policy_helpers(m);
  bind_policy_function(m);
  m.def(
      "plan",
      [](const py::kwargs& keywords) {
        const api::JobOptions options = job_options(keywords);
        Expected<std::unique_ptr<api::Job>> job = [&] {
          py::gil_scoped_release unlocked;
          return api::plan_or_search(options);
        }();
        if (!job) raise(job.error());
        return std::move(*job);
      },
      "Plans a model preset (model=), a traced graph (graph= JSON text, graph_file= a file) on a cluster under a "
      "policy (api::plan_or_search; megatron-best / deepspeed-best search). Keywords: keywords(). Without degrees, "
      "the policy's defaults on `gpus` (default: every GPU of the cluster); dp defaults to gpus / (tp x pp). Raises "
      "PlanError, and TypeError for an unknown keyword.");
  m.def("keywords", &keyword_table, "plan()'s keywords: {keyword: (default, help)}");
}

}  // namespace loom::bindings

PYBIND11_MODULE(_loom_engine, m) {
  m.doc() = "Loom's engine (the api's job pipeline) for python/loom; use loom.plan / loom.parallelize";
  loom::bindings::bind_module(m);
}
