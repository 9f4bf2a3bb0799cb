#include "policy_function.h"

#include <fmt/format.h>
#include <pybind11/stl.h>

#include "loom/api/job.h"
#include "plan_object.h"
#include "raise.h"
#include "request_keywords.h"

namespace py = pybind11;

namespace loom::bindings {
namespace {

// What a policy function plans for: the GPUs, the cluster, and the degrees the options resolve to.
struct Resource {
  int gpus = 0;
  std::string cluster;
  policy::ParallelConfig config;
};

// The options for a Python policy: degrees resolved as megatron resolves them (any dp x tp x pp), and
// every device planned explicitly (the fold's slice is megatron's own).
api::JobOptions python_policy_options(const py::kwargs& keywords, const std::string& name) {
  if (keywords.contains("policy"))
    throw py::type_error("plan_with_policy() takes the policy as its first argument, not as the keyword policy");
  api::JobOptions options = job_options(keywords);
  if (options.fold == api::Fold::on)
    raise(Error{fmt::format("policy {} is a Python function: its plan holds every device, it cannot be folded", name),
                "leave fold out (or give fold=\"off\")"});
  options.fold = api::Fold::off;
  options.policy = "megatron";
  return options;
}

std::unique_ptr<api::Job> plan_with_policy(const py::function& policy, const std::string& name,
                                           const py::kwargs& keywords) {
  const api::JobOptions options = python_policy_options(keywords, name);
  std::unique_ptr<api::Job> job;
  const auto view = std::make_shared<PlanView>();
  const Expected<void> planned = [&]() -> Expected<void> {
    py::gil_scoped_release unlocked;
    LOOM_ASSIGN_OR_RETURN(job, api::load_job(options));
    // Without degrees the config is megatron's defaults, which the function may not follow: say the GPUs only.
    job->description = options.dp + options.tp + options.pp > 0
                           ? api::describe(name, job->request.config)
                           : fmt::format("{}: {} GPUs", name, job->request.gpus);
    const auto call = [&](plan::Plan& plan, const policy::ParallelConfig& config) -> Expected<void> {
      py::gil_scoped_acquire locked;
      const Resource resource{.gpus = job->request.gpus, .cluster = job->cluster.name, .config = config};
      view->plan = &plan;
      view->catalog = &job->catalog;
      // The Plan is the job's only while the function runs (a kept one raises afterwards).
      struct Release {
        PlanView& view;
        ~Release() { view.plan = nullptr; }
      } release{*view};
      const py::object returned = policy(view, resource);
      if (!returned.is_none())
        return fail(fmt::format("policy {} returned {}; a policy changes the Plan it is given and returns None", name,
                                py::repr(returned).cast<std::string>()),
                    "return nothing from the policy function");
      return {};
    };
    LOOM_RETURN_IF_ERROR(api::apply_policy(*job, call));
    LOOM_RETURN_IF_ERROR(api::materialize(*job));
    return api::simulate(*job);
  }();
  checked(with_context(planned, fmt::format("policy {}", name)));
  job->options.policy = name;  // what PlanResult.policy and the summary report
  return job;
}

}  // namespace

void bind_policy_function(py::module_& m) {
  py::class_<Resource>(m, "Resource", "what a policy plans for: gpus, cluster, config (the resolved degrees)")
      .def_readonly("gpus", &Resource::gpus)
      .def_readonly("cluster", &Resource::cluster)
      .def_readonly("config", &Resource::config)
      .def("__repr__", [](const Resource& r) {
        return fmt::format("<loom Resource {} GPUs of {}: dp {} x tp {} x pp {}>", r.gpus, r.cluster, r.config.dp,
                           r.config.tp, r.config.pp);
      });
  m.def("plan_with_policy", &plan_with_policy, py::arg("policy"), py::arg("name"),
        "Plans with a Python policy: policy(plan, resource) transforms the fresh Plan with the primitives; the engine "
        "then validates, materializes and simulates it. Keywords: plan()'s (degrees resolve as for megatron). Raises "
        "PlanError naming the op for a plan the engine refuses.");
}

}  // namespace loom::bindings
