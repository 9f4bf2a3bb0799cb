#include "loom/plan/plan.h"

#include <algorithm>

#include <fmt/format.h>

#include "loom/core/strings.h"
#include "loom/ir/autograd.h"

namespace loom::plan {
namespace {

// Replaces '*' by identifiers "*0".."*{k-1}" for the k dims it stands for in this instance.
ir::Annotation expand_variadic(ir::Annotation annotation, const ir::Graph& graph, const ir::Op& op) {
  std::size_t count = 0;
  for (std::size_t t = 0; t < annotation.inputs.size(); ++t) {
    const ir::TensorAnnotation& tensor = annotation.inputs[t];
    if (!tensor.opaque && tensor.has_variadic()) {
      count = graph.tensor(op.inputs[t]).shape.rank() - (tensor.dims.size() - 1);
      break;
    }
  }
  const auto expand = [count](std::vector<ir::TensorAnnotation>& side) {
    for (ir::TensorAnnotation& tensor : side) {
      std::vector<ir::AnnotatedDim> dims;
      for (ir::AnnotatedDim& dim : tensor.dims) {
        if (dim.atoms.size() == 1 && dim.atoms[0].kind == ir::DimAtom::Kind::variadic) {
          for (std::size_t i = 0; i < count; ++i)
            dims.push_back(ir::AnnotatedDim{{ir::DimAtom{ir::DimAtom::Kind::identifier, fmt::format("*{}", i), 0, ir::DimFlag::none}}});
        } else {
          dims.push_back(std::move(dim));
        }
      }
      tensor.dims = std::move(dims);
    }
  };
  expand(annotation.inputs);
  expand(annotation.outputs);
  return annotation;
}

SubTensor whole(const ir::Graph& graph, ir::TensorId id) { return SubTensor::whole(id, graph.tensor(id).shape); }

}  // namespace

bool OpLayout::shape_only(std::size_t input) const {
  return std::find(shape_only_inputs.begin(), shape_only_inputs.end(), static_cast<int>(input)) != shape_only_inputs.end();
}

std::vector<SubOpId> Plan::live_sub_ops() const {
  std::vector<SubOpId> ids;
  for (const SubOp& s : sub_ops)
    if (s.live) ids.push_back(s.id);
  return ids;
}

Expected<Plan> make_plan(const ir::Graph& graph, const ir::OpCatalog& catalog) {
  Plan plan;
  plan.graph = &graph;
  plan.layouts.resize(graph.ops.size());
  plan.parts.resize(graph.ops.size());
  for (const ir::Op& op : graph.ops) {
    const ir::Op& forward = op.is_mirror() ? graph.op(op.mirror_of) : op;
    const ir::OpDef* def = catalog.find(forward.type);
    if (def == nullptr)
      return fail(fmt::format("op '{}' has unknown type '{}'", op.name, forward.type), "`loom ops` lists the known types");
    LOOM_ASSIGN_OR_RETURN(ir::Annotation annotation,
                          with_context(ir::parse_annotation(forward.annotation), fmt::format("op '{}'", op.name)));
    plan.layouts[op.id.index()] =
        OpLayout{expand_variadic(std::move(annotation), graph, forward), def->additive_inputs, def->shape_only_inputs,
                 def->linear};

    SubOp sub;
    sub.id = SubOpId(static_cast<std::uint32_t>(plan.sub_ops.size()));
    sub.op = op.id;
    sub.name = op.name;
    for (ir::TensorId in : op.inputs) sub.inputs.push_back(whole(graph, in));
    for (ir::TensorId out : op.outputs) sub.outputs.push_back(whole(graph, out));
    if (op.is_mirror()) {
      // Forward ops come first in program order, so their single part already exists.
      const SubOpId forward_part = plan.parts[op.mirror_of.index()].front();
      sub.mirror = forward_part;
      (ir::grad_part(op) == ir::GradPart::weight ? plan.sub_op(forward_part).weight_mirror
                                                 : plan.sub_op(forward_part).mirror) = sub.id;
    }
    plan.parts[op.id.index()].push_back(sub.id);
    plan.sub_ops.push_back(std::move(sub));
  }
  return plan;
}

std::string plan_to_text(const Plan& plan) {
  std::string text;
  for (const SubOp& s : plan.sub_ops) {
    if (!s.live) continue;
    std::vector<std::string> ins, outs;
    for (const SubTensor& t : s.inputs) ins.push_back(t.to_string());
    for (const SubTensor& t : s.outputs) outs.push_back(t.to_string());
    text += fmt::format("${} {} @{} ({}) -> ({})\n", s.id.value, s.name,
                        s.device == kUnassigned ? std::string("?") : std::to_string(s.device), join(ins, ", "),
                        join(outs, ", "));
  }
  for (const auto& [a, b] : plan.orders) text += fmt::format("order ${} < ${}\n", a.value, b.value);
  return text;
}

}  // namespace loom::plan
