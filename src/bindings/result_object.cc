#include "result_object.h"

#include <memory>

#include <pybind11/stl.h>

#include "loom/api/emit_programs.h"
#include "loom/api/job.h"
#include "loom/api/memory_advice.h"
#include "loom/api/verify_job.h"
#include "loom/codegen/rank_programs.h"
#include "loom/policy/recompute_policy.h"
#include "raise.h"

namespace py = pybind11;

namespace loom::bindings {
namespace {

std::vector<std::int64_t> peak_bytes(const api::Job& r) {
  std::vector<std::int64_t> out;
  for (const sim::DeviceMetrics& d : r.metrics.per_device) out.push_back(d.peak_bytes);
  return out;
}

py::dict degrees(const api::Job& r) {
  const policy::ParallelConfig& c = r.request.config;
  py::dict d;
  d["dp"] = c.dp;
  d["tp"] = c.tp;
  d["pp"] = c.pp;
  d["micro_batches"] = c.micro_batches;
  d["virtual_stages"] = c.virtual_stages;
  d["block_order"] = std::string(plan::name(c.block_order));
  d["sequence_parallel"] = c.sequence_parallel;
  d["zero"] = c.zero;
  d["recompute"] = std::string(policy::name(c.recompute));
  d["overlap"] = std::string(policy::name(c.overlap));
  return d;
}

py::dict summary(const api::Job& r) {
  py::dict d;
  d["description"] = r.description;
  d["policy"] = r.options.policy;
  d["cluster"] = r.cluster.name;
  d["devices"] = r.metrics.devices;
  d["step_time"] = r.metrics.step_time;
  d["mfu"] = r.metrics.mfu;
  d["samples_per_second"] = r.metrics.samples_per_second;
  d["tokens_per_second"] = r.metrics.tokens_per_second;
  d["peak_memory"] = peak_bytes(r);
  d["memory_capacity"] = r.metrics.memory_capacity;
  d["out_of_memory"] = r.metrics.out_of_memory();
  d["folded"] = r.folded;
  d["gpus"] = r.request.gpus;
  d["memory_advice"] = api::memory_advice(r);
  return d;
}

py::dict emit(const api::Job& r) {
  if (r.folded)
    raise(Error{"the rank programs need every rank's plan, but this plan is folded (one micro-batch of one replica)",
                "plan with fold=\"off\""});
  Expected<codegen::RankPrograms> programs = [&] {
    py::gil_scoped_release unlocked;
    return codegen::emit_rank_programs(r.exec, r.description);
  }();
  if (!programs) raise(programs.error());
  py::dict d;
  d["manifest"] = programs->manifest;
  d["modules"] = programs->modules;
  return d;
}

py::dict error_dict(const verify::ErrorStat& e) {
  py::dict d;
  d["max_abs"] = e.max_abs;
  d["max_rel"] = e.max_rel;
  d["worst"] = e.worst;
  return d;
}

// `loom verify`'s proof of this job's plan (api::verify_job): the largest errors against one device.
py::dict verify_result(const api::Job& r, std::uint64_t seed) {
  const api::VerifyReport proof = checked([&] {
    py::gil_scoped_release unlocked;
    return api::verify_job(r, seed);
  }());
  py::dict d;
  d["worst"] = proof.worst();
  d["activation"] = error_dict(proof.comparison.activation);
  d["gradient"] = error_dict(proof.comparison.gradient);
  d["updated"] = error_dict(proof.comparison.updated);
  d["loss"] = error_dict(proof.comparison.loss);
  d["closed_step"] = error_dict(proof.closed.error);
  return d;
}

}  // namespace

void bind_plan_result(py::module_& m) {
  py::class_<api::Job, std::unique_ptr<api::Job>>(
      m, "PlanResult", "A planned, checked and simulated job (api::Job): summary numbers and rank programs")
      .def_property_readonly("description", [](const api::Job& r) { return r.description; })
      .def_property_readonly("policy", [](const api::Job& r) { return r.options.policy; })
      .def_property_readonly("cluster", [](const api::Job& r) { return r.cluster.name; })
      .def_property_readonly("devices", [](const api::Job& r) { return r.metrics.devices; },
                             "devices the plan runs on (the world size of its rank programs)")
      .def_property_readonly("degrees", &degrees, "the policy's degrees: dp, tp, pp, micro_batches, zero, ...")
      .def_property_readonly("step_time", [](const api::Job& r) { return r.metrics.step_time; },
                             "simulated seconds per training step on the cluster")
      .def_property_readonly("mfu", [](const api::Job& r) { return r.metrics.mfu; },
                             "model FLOPs utilisation in [0, 1] (sim/metrics.h)")
      .def_property_readonly("peak_memory", &peak_bytes, "peak bytes of every device, by device")
      .def_property_readonly("memory_capacity", [](const api::Job& r) { return r.metrics.memory_capacity; },
                             "bytes of one GPU of the cluster")
      .def_property_readonly("out_of_memory", [](const api::Job& r) { return r.metrics.out_of_memory(); })
      .def_property_readonly("folded", [](const api::Job& r) { return r.folded; })
      .def_property_readonly("memory_advice", &api::memory_advice,
                             "for a plan that does not fit: the options that cut its largest memory class (else '')")
      .def("summary", &summary, "the numbers above as a dict")
      .def("emit", &emit,
           "the per-rank PyTorch programs: {'manifest': manifest.json text, 'modules': [rank_<r>.py text by rank]}")
      .def("verify", &verify_result, py::arg("seed") = 1,
           "`loom verify`'s proof: every device's program run with the float64 reference kernels against one device; "
           "returns the largest relative error ('worst') and each class's {max_abs, max_rel, worst}")
      .def(
          "write_files",
          [](const api::Job& r, const std::string& dir) {
            py::gil_scoped_release unlocked;
            return checked(api::write_plan_files(r, dir));
          },
          py::arg("dir"), "writes plan.json, exec.json, trace.json and report.html into dir; returns their paths")
      .def(
          "write_programs",
          [](const api::Job& r, const std::string& dir) {
            py::gil_scoped_release unlocked;
            return checked(api::write_rank_programs(r, dir));
          },
          py::arg("dir"), "writes rank_<r>.py and manifest.json into dir (as `loom plan --emit`); returns their paths")
      .def("__repr__", [](const api::Job& r) {
        return fmt::format("<loom PlanResult {}: step {:.4g} s, MFU {:.1f} %{}>", r.description, r.metrics.step_time,
                           100 * r.metrics.mfu, r.metrics.out_of_memory() ? ", OUT OF MEMORY" : "");
      });
}

}  // namespace loom::bindings
