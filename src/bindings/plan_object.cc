#include "plan_object.h"

#include <fmt/format.h>
#include <pybind11/stl.h>

#include "loom/ir/annotation.h"
#include "loom/ir/graph.h"
#include "loom/plan/primitives.h"
#include "loom/policy/stages.h"
#include "raise.h"

namespace py = pybind11;

namespace loom::bindings {
namespace {

// What a policy reads of a graph op and a tensor: plain values (ids are ints, -1 for none).
struct OpInfo {
  std::int64_t id = 0;
  std::string name, type, pass, annotation;
  std::int64_t layer = -1;  // policy::layer_ordinals: the op's numbered layer, -1 outside layers or passes
  std::vector<std::int64_t> inputs, outputs;
  std::int64_t mirror_of = -1;  // a backward op: the forward op it mirrors
  bool linear = false;          // OpDef::linear: may be split by value (ValueSplit)
};

struct TensorInfo {
  std::int64_t id = 0;
  std::string name, role, dtype;
  std::vector<std::int64_t> shape;
  std::int64_t owner = -1;     // a gradient's tensor, an optimizer state's parameter
  std::int64_t producer = -1;  // the op writing it; -1 for inputs and parameters
};

struct SubTensorInfo {
  std::int64_t tensor = 0;
  std::vector<std::tuple<std::int64_t, std::int64_t, std::int64_t>> box;  // (start, stop, step) per dimension
  std::pair<std::int64_t, std::int64_t> value;                            // value part (index, count)
};

struct SubOpInfo {
  std::int64_t id = 0, op = 0;
  std::string name;
  std::int64_t device = plan::kUnassigned;
  bool live = true;
  std::int64_t mirror = -1;  // forward part <-> its backward part
  std::vector<SubTensorInfo> inputs, outputs;
};

std::int64_t id_or_none(std::uint32_t value, bool valid) { return valid ? static_cast<std::int64_t>(value) : -1; }

OpInfo op_info(const plan::Plan& plan, const ir::Op& op, const std::vector<int>& layers) {
  const auto ids = [](const std::vector<ir::TensorId>& list) {
    std::vector<std::int64_t> out;
    for (ir::TensorId t : list) out.push_back(t.value);
    return out;
  };
  return {.id = op.id.value,
          .name = op.name,
          .type = op.type,
          .pass = std::string(ir::name(op.pass)),
          .annotation = ir::to_string(plan.layouts[op.id.index()].annotation),
          .layer = layers[op.id.index()],
          .inputs = ids(op.inputs),
          .outputs = ids(op.outputs),
          .mirror_of = id_or_none(op.mirror_of.value, op.mirror_of.valid()),
          .linear = plan.layouts[op.id.index()].linear};
}

SubTensorInfo sub_tensor_info(const plan::SubTensor& t) {
  SubTensorInfo info{.tensor = t.tensor.value, .box = {}, .value = {t.value.index, t.value.count}};
  for (const plan::IndexRange& r : t.box) info.box.emplace_back(r.start, r.stop, r.step);
  return info;
}

SubOpInfo sub_op_info(const plan::SubOp& s) {
  SubOpInfo info{.id = s.id.value, .op = s.op.value, .name = s.name, .device = s.device, .live = s.live,
                 .mirror = id_or_none(s.mirror.value, s.mirror.valid()), .inputs = {}, .outputs = {}};
  for (const plan::SubTensor& t : s.inputs) info.inputs.push_back(sub_tensor_info(t));
  for (const plan::SubTensor& t : s.outputs) info.outputs.push_back(sub_tensor_info(t));
  return info;
}

std::string algo_repr(const plan::TransAlgo& algo) {
  if (const auto* split = std::get_if<plan::SplitAlgo>(&algo))
    return fmt::format("Split('{}'{})", split->identifier, split->strided ? ", strided=True" : "");
  if (const auto* replicate = std::get_if<plan::ReplicateAlgo>(&algo))
    return replicate->redundant_backward ? "Replicate(redundant_backward=True)" : "Replicate()";
  return "ValueSplit()";
}

void bind_algorithms(py::module_& m) {
  py::class_<plan::SplitAlgo>(m, "Split", "trans algorithm: split along an identifier of the op's annotation")
      .def(py::init([](std::string identifier, bool strided) {
             return plan::SplitAlgo{std::move(identifier), strided};
           }),
           py::arg("identifier"), py::arg("strided") = false)
      .def_readonly("identifier", &plan::SplitAlgo::identifier)
      .def_readonly("strided", &plan::SplitAlgo::strided)
      .def("__eq__", [](const plan::SplitAlgo& a, const plan::SplitAlgo& b) {
        return a.identifier == b.identifier && a.strided == b.strided;
      })
      .def("__repr__", [](const plan::SplitAlgo& a) { return algo_repr(a); });
  py::class_<plan::ReplicateAlgo>(m, "Replicate",
                                  "trans algorithm: n copies; redundant_backward: each computes whole gradients")
      .def(py::init([](bool redundant) { return plan::ReplicateAlgo{redundant}; }),
           py::arg("redundant_backward") = false)
      .def_readonly("redundant_backward", &plan::ReplicateAlgo::redundant_backward)
      .def("__eq__", [](const plan::ReplicateAlgo& a, const plan::ReplicateAlgo& b) {
        return a.redundant_backward == b.redundant_backward;
      })
      .def("__repr__", [](const plan::ReplicateAlgo& a) { return algo_repr(a); });
  py::class_<plan::ValueSplitAlgo>(m, "ValueSplit", "trans algorithm: value parts of an op linear in its inputs")
      .def(py::init<>())
      .def("__eq__", [](const plan::ValueSplitAlgo&, const plan::ValueSplitAlgo&) { return true; })
      .def("__repr__", [](const plan::ValueSplitAlgo& a) { return algo_repr(a); });
}

void bind_infos(py::module_& m) {
  py::class_<OpInfo>(m, "Op", "a graph op: id, name, type, pass, annotation, layer, inputs, outputs (tensor ids)")
      .def_readonly("id", &OpInfo::id)
      .def_readonly("name", &OpInfo::name)
      .def_readonly("type", &OpInfo::type)
      .def_readonly("pass_", &OpInfo::pass, "'forward', 'backward' or 'optimizer'")
      .def_readonly("annotation", &OpInfo::annotation, "its dimension annotation, '*' expanded to *0, *1, ...")
      .def_readonly("layer", &OpInfo::layer)
      .def_readonly("inputs", &OpInfo::inputs)
      .def_readonly("outputs", &OpInfo::outputs)
      .def_readonly("mirror_of", &OpInfo::mirror_of)
      .def_readonly("linear", &OpInfo::linear)
      .def_property_readonly("is_mirror", [](const OpInfo& o) { return o.mirror_of >= 0; })
      .def("__repr__", [](const OpInfo& o) { return fmt::format("<Op {} '{}' {} {}>", o.id, o.name, o.type, o.pass); });
  py::class_<TensorInfo>(m, "Tensor", "a graph tensor: id, name, role, dtype, shape, owner, producer")
      .def_readonly("id", &TensorInfo::id)
      .def_readonly("name", &TensorInfo::name)
      .def_readonly("role", &TensorInfo::role)
      .def_readonly("dtype", &TensorInfo::dtype)
      .def_readonly("shape", &TensorInfo::shape)
      .def_readonly("owner", &TensorInfo::owner)
      .def_readonly("producer", &TensorInfo::producer)
      .def("__repr__", [](const TensorInfo& t) { return fmt::format("<Tensor {} '{}' {}>", t.id, t.name, t.role); });
  py::class_<SubTensorInfo>(m, "SubTensor", "what a sub-op reads or writes: tensor, box, value (index, count)")
      .def_readonly("tensor", &SubTensorInfo::tensor)
      .def_readonly("box", &SubTensorInfo::box)
      .def_readonly("value", &SubTensorInfo::value);
  py::class_<SubOpInfo>(m, "SubOp", "a part of an op: id, op, name, device (-1: none), live, mirror, inputs, outputs")
      .def_readonly("id", &SubOpInfo::id)
      .def_readonly("op", &SubOpInfo::op)
      .def_readonly("name", &SubOpInfo::name)
      .def_readonly("device", &SubOpInfo::device)
      .def_readonly("live", &SubOpInfo::live)
      .def_readonly("mirror", &SubOpInfo::mirror)
      .def_readonly("inputs", &SubOpInfo::inputs)
      .def_readonly("outputs", &SubOpInfo::outputs)
      .def("__repr__", [](const SubOpInfo& s) { return fmt::format("<SubOp {} '{}' on {}>", s.id, s.name, s.device); });
}

}  // namespace

std::vector<std::int64_t> ids_of(const std::vector<plan::SubOpId>& list) {
  std::vector<std::int64_t> out;
  for (plan::SubOpId s : list) out.push_back(s.value);
  return out;
}

plan::Plan& PlanView::get() const {
  if (plan == nullptr)
    raise(Error{"this Plan belongs to a policy function that has returned",
                "use the Plan only inside the policy function it was passed to"});
  return *plan;
}

plan::SubOpId PlanView::sub_op(std::int64_t id, bool live) const {
  const plan::Plan& p = get();
  if (id < 0 || static_cast<std::size_t>(id) >= p.sub_ops.size())
    raise(Error{fmt::format("sub-op {} does not exist (the plan has {})", id, p.sub_ops.size()),
                "use the ids plan.parts(op) and trans return"});
  const plan::SubOpId s(static_cast<std::uint32_t>(id));
  if (live && !p.sub_op(s).live)
    raise(Error{fmt::format("sub-op {} '{}' was transformed into parts", id, p.sub_op(s).name),
                "transform or place the parts trans returned (plan.parts(op))"});
  return s;
}

ir::OpId PlanView::op(std::int64_t id) const {
  const plan::Plan& p = get();
  if (id < 0 || static_cast<std::size_t>(id) >= p.graph->ops.size())
    raise(Error{fmt::format("op {} does not exist (the graph has {})", id, p.graph->ops.size()),
                "use the ids of plan.ops"});
  return ir::OpId(static_cast<std::uint32_t>(id));
}

ir::TensorId PlanView::tensor(std::int64_t id) const {
  const plan::Plan& p = get();
  if (id < 0 || static_cast<std::size_t>(id) >= p.graph->tensors.size())
    raise(Error{fmt::format("tensor {} does not exist (the graph has {})", id, p.graph->tensors.size()),
                "use the ids of plan.tensors and the ops' inputs and outputs"});
  return ir::TensorId(static_cast<std::uint32_t>(id));
}

void bind_plan(py::module_& m) {
  bind_algorithms(m);
  bind_infos(m);
  py::class_<PlanView, PlanHandle>(m, "Plan",
                                   "the job's plan while a policy function runs: the graph, the sub-ops, and the "
                                   "primitives trans / assign / order (plan/primitives.h)")
      .def_property_readonly(
          "ops",
          [](const PlanView& v) {
            const plan::Plan& p = v.get();
            const std::vector<int> layers = policy::layer_ordinals(*p.graph);
            std::vector<OpInfo> out;
            for (const ir::Op& op : p.graph->ops) out.push_back(op_info(p, op, layers));
            return out;
          },
          "every op of the training graph, in program order (forward, backward, optimizer)")
      .def_property_readonly(
          "tensors",
          [](const PlanView& v) {
            const ir::Graph& g = *v.get().graph;
            const std::vector<ir::OpId> producers = ir::producers(g);
            std::vector<TensorInfo> out;
            for (const ir::FullTensor& t : g.tensors) {
              const ir::OpId p = producers[t.id.index()];
              out.push_back({.id = t.id.value, .name = t.name, .role = std::string(ir::name(t.role)),
                             .dtype = std::string(ir::name(t.dtype)), .shape = t.shape.dims,
                             .owner = id_or_none(t.owner.value, t.owner.valid()),
                             .producer = id_or_none(p.value, p.valid())});
            }
            return out;
          },
          "every tensor of the training graph, by id")
      .def_property_readonly(
          "inputs",
          [](const PlanView& v) {
            std::vector<std::int64_t> out;
            for (ir::TensorId t : v.get().graph->inputs) out.push_back(t.value);
            return out;
          },
          "the graph's input tensors (dimension 0: the batch)")
      .def(
          "parts", [](const PlanView& v, std::int64_t op) { return ids_of(v.get().parts[v.op(op).index()]); },
          py::arg("op"), "the live sub-ops of an op, in creation order")
      .def(
          "sub_op", [](const PlanView& v, std::int64_t id) { return sub_op_info(v.get().sub_op(v.sub_op(id, false))); },
          py::arg("id"))
      .def(
          "dim_identifier",
          [](const PlanView& v, std::int64_t sub_op, bool output, std::size_t tensor, std::size_t dim) {
            const plan::SubOpId s = v.sub_op(sub_op, false);
            const plan::SubOp& sub = v.get().sub_op(s);
            const auto& list = output ? sub.outputs : sub.inputs;
            if (tensor >= list.size() || dim >= list[tensor].box.size())
              raise(Error{fmt::format("'{}' has no {} {} with a dimension {}", sub.name, output ? "output" : "input",
                                      tensor, dim)});
            return plan::dim_identifier(v.get(), s, output, tensor, dim);
          },
          py::arg("sub_op"), py::arg("output"), py::arg("tensor"), py::arg("dim"),
          "the identifier the op's annotation gives that dimension ('*0' for the first '*' dim), None for fixed ones")
      .def(
          "trans",
          [](const PlanView& v, std::int64_t sub_op, const plan::TransAlgo& algo, int n) {
            const plan::SubOpId s = v.sub_op(sub_op);
            const std::string name = v.get().sub_op(s).name;
            return ids_of(checked(with_context(plan::trans(v.get(), s, algo, n),
                                               fmt::format("trans of '{}' by {} into {}", name, algo_repr(algo), n))));
          },
          py::arg("sub_op"), py::arg("algo"), py::arg("n"),
          "op-trans: replaces the sub-op by n parts (Split / Replicate / ValueSplit) and returns their ids; a "
          "forward sub-op's backward part follows")
      .def(
          "assign",
          [](const PlanView& v, std::int64_t sub_op, int device) {
            const plan::SubOpId s = v.sub_op(sub_op);
            checked(with_context(plan::assign(v.get(), s, device), fmt::format("assign of '{}'", v.get().sub_op(s).name)));
          },
          py::arg("sub_op"), py::arg("device"), "op-assign: places the sub-op (and its backward part) on a device")
      .def(
          "order",
          [](const PlanView& v, std::int64_t first, std::int64_t second) {
            checked(with_context(plan::order(v.get(), v.sub_op(first), v.sub_op(second)), "order"));
          },
          py::arg("first"), py::arg("second"), "op-order: `first` happens before `second`")
      .def("text", [](const PlanView& v) { return plan::plan_to_text(v.get()); }, "the plan, one sub-op per line")
      .def("__repr__", [](const PlanView& v) {
        if (v.plan == nullptr) return std::string("<loom Plan (its policy function has returned)>");
        return fmt::format("<loom Plan of '{}': {} ops, {} live sub-ops>", v.plan->graph->name, v.plan->graph->ops.size(),
                           v.plan->live_sub_ops().size());
      });
}

}  // namespace loom::bindings
