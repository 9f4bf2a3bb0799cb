// `_loom_engine`: the api facade in Python (python/loom/api.py wraps it; docs/python_api.md). plan(...)
// takes PlanRequest's fields as keywords, their defaults those of the C++ structs, and returns a PlanResult;
// engine errors raise PlanError with the engine's message and hint. No planning logic lives here.
#include <algorithm>

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <fmt/format.h>

#include "loom/api/plan_job.h"
#include "loom/policy/recompute_policy.h"
#include "plan_call.h"
#include "raise.h"
#include "result_object.h"

namespace py = pybind11;

namespace loom::bindings {
namespace {

template <class T>
T value_or_raise(Expected<T> result, std::string_view what) {
  if (!result) raise(with_context(std::move(result).error(), what));
  return std::move(*result);
}

api::Fold parse_fold(const std::string& text) {
  if (text == "auto") return api::Fold::automatic;
  if (text == "on") return api::Fold::on;
  if (text == "off") return api::Fold::off;
  raise(Error{fmt::format("fold: unknown value '{}'", text), "use \"auto\", \"on\" or \"off\""});
}

plan::ScheduleKind parse_schedule(const std::string& text) {
  if (text == "1f1b") return plan::ScheduleKind::one_f_one_b;
  if (text == "gpipe") return plan::ScheduleKind::gpipe;
  raise(Error{fmt::format("schedule: unknown schedule '{}'", text), "use \"1f1b\" or \"gpipe\""});
}

// Keyword arguments in PlanRequest's order, grouped as the struct groups them.
struct Keywords {
  std::string model, graph, graph_file;
  std::int64_t batch, seq, layers, vocab_multiple;
  std::string dtype;
  bool shrink;
  std::string optimizer;
  double lr, beta1, beta2, eps, weight_decay, momentum;
  bool master_weights;
  std::string cluster;
  int gpus;
  std::string policy;
  int dp, tp, pp, micro_batches;
  std::string schedule;
  int virtual_stages;
  bool sequence_parallel;
  int zero;
  std::string recompute, profile, fold;
};

api::PlanRequest request_of(const Keywords& k) {
  api::PlanRequest r;
  r.model = k.model;
  r.graph_file = k.graph_file;
  r.model_options.batch = k.batch;
  r.model_options.seq = k.seq;
  r.model_options.layers = k.layers;
  r.model_options.vocab_multiple = k.vocab_multiple;
  r.model_options.dtype = value_or_raise(ir::parse_dtype(k.dtype), "dtype");
  r.model_options.shrink = k.shrink;
  r.optimizer.kind = value_or_raise(ir::parse_optimizer(k.optimizer), "optimizer");
  r.optimizer.lr = k.lr;
  r.optimizer.beta1 = k.beta1;
  r.optimizer.beta2 = k.beta2;
  r.optimizer.eps = k.eps;
  r.optimizer.weight_decay = k.weight_decay;
  r.optimizer.momentum = k.momentum;
  r.optimizer.master_weights = k.master_weights;
  r.cluster = k.cluster;
  r.gpus = k.gpus;
  r.policy = k.policy;
  if (k.dp <= 0 && k.tp <= 0 && k.pp <= 0) {  // no degree given: the policy's on the devices (the CLI's default)
    r.config = value_or_raise(policy::default_degrees(k.policy, k.gpus > 0 ? k.gpus : 1), "gpus");
  } else {
    r.config.dp = std::max(k.dp, 1);
    r.config.tp = std::max(k.tp, 1);
    r.config.pp = std::max(k.pp, 1);
  }
  r.config.micro_batches = k.micro_batches > 0 ? k.micro_batches : r.config.pp > 1 ? 2 * r.config.pp : 1;
  r.config.schedule = parse_schedule(k.schedule);
  r.config.virtual_stages = k.virtual_stages;
  r.config.sequence_parallel = k.sequence_parallel;
  r.config.zero = k.zero;
  r.config.recompute = value_or_raise(policy::parse_recompute(k.recompute), "recompute");
  r.profile = k.profile;
  r.fold = parse_fold(k.fold);
  return r;
}

std::unique_ptr<api::PlanResult> plan(const Keywords& k) {
  const api::PlanRequest request = request_of(k);
  Expected<std::unique_ptr<api::PlanResult>> result = [&] {
    py::gil_scoped_release unlocked;
    return plan_call(request, k.graph);
  }();
  if (!result) raise(result.error());
  return std::move(*result);
}

}  // namespace

void bind_module(py::module_& m) {
  py::register_exception<PlanFailure>(m, "PlanError", PyExc_RuntimeError);
  bind_plan_result(m);
  const api::PlanRequest d{};
  const ir::OptimizerOptions& o = d.optimizer;
  const policy::ParallelConfig& c = d.config;
  m.def(
      "plan",
      [](std::string model, std::string graph, std::string graph_file, std::int64_t batch, std::int64_t seq,
         std::int64_t layers, std::int64_t vocab_multiple, std::string dtype, bool shrink, std::string optimizer,
         double lr, double beta1, double beta2, double eps, double weight_decay, double momentum, bool master_weights,
         std::string cluster, int gpus, std::string policy, int dp, int tp, int pp, int micro_batches,
         std::string schedule, int virtual_stages, bool sequence_parallel, int zero, std::string recompute,
         std::string profile, std::string fold) {
        return plan(Keywords{model, graph, graph_file, batch, seq, layers, vocab_multiple, dtype, shrink, optimizer,
                             lr, beta1, beta2, eps, weight_decay, momentum, master_weights, cluster, gpus, policy, dp,
                             tp, pp, micro_batches, schedule, virtual_stages, sequence_parallel, zero, recompute,
                             profile, fold});
      },
      py::kw_only(), py::arg("model") = d.model, py::arg("graph") = "", py::arg("graph_file") = d.graph_file,
      py::arg("batch") = d.model_options.batch, py::arg("seq") = d.model_options.seq,
      py::arg("layers") = d.model_options.layers, py::arg("vocab_multiple") = d.model_options.vocab_multiple,
      py::arg("dtype") = std::string(ir::name(d.model_options.dtype)), py::arg("shrink") = d.model_options.shrink,
      py::arg("optimizer") = std::string(ir::name(o.kind)), py::arg("lr") = o.lr, py::arg("beta1") = o.beta1,
      py::arg("beta2") = o.beta2, py::arg("eps") = o.eps, py::arg("weight_decay") = o.weight_decay,
      py::arg("momentum") = o.momentum, py::arg("master_weights") = o.master_weights, py::arg("cluster") = d.cluster,
      py::arg("gpus") = d.gpus, py::arg("policy") = d.policy, py::arg("dp") = 0, py::arg("tp") = 0,
      py::arg("pp") = 0, py::arg("micro_batches") = 0, py::arg("schedule") = "1f1b",
      py::arg("virtual_stages") = c.virtual_stages, py::arg("sequence_parallel") = c.sequence_parallel,
      py::arg("zero") = c.zero, py::arg("recompute") = std::string(policy::name(c.recompute)),
      py::arg("profile") = d.profile, py::arg("fold") = "auto",
      "Plans a model preset (model=), a traced graph (graph= JSON text, graph_file= a file) on a cluster under a "
      "policy and its degrees (api::plan_model; megatron-best / deepspeed-best search). Degrees left 0 (all of dp, "
      "tp, pp) are the policy's defaults on `gpus` devices (policy::default_degrees; 1 when gpus is 0); "
      "micro_batches 0: 2 x pp when pipelined, else 1. Raises PlanError.");
}

}  // namespace loom::bindings

PYBIND11_MODULE(_loom_engine, m) {
  m.doc() = "Loom's engine (the api facade) for python/loom; use loom.plan / loom.parallelize";
  loom::bindings::bind_module(m);
}
