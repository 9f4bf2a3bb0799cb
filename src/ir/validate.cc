// Semantic validation: what check_structure cannot see without the operator catalog.
//
//   1. structure (ir::check_structure);
//   2. roles: the graph's input/parameter lists agree with the tensors' roles, produced and leaf
//      tensors have roles that allow it, gradients and optimizer states name their owner;
//   3. per op: the type is known; an op that mirrors nothing is re-resolved from its recorded inputs and
//      must give the recorded output count, shapes, dtypes and annotation; a backward op that mirrors a
//      forward op must match it (type, annotation) and its tensors must line up with the mirror layout;
//   4. the loss, when set, is a scalar some op produces.
#include "loom/ir/validate.h"

#include <fmt/format.h>

#include "loom/ir/autograd.h"

namespace loom::ir {
namespace {

std::string op_label(const Op& op) { return fmt::format("op '{}' (#{}, {})", op.name, op.id.value, op.type); }

bool is_leaf_role(const FullTensor& t) {
  switch (t.role) {
    case TensorRole::input: return true;
    case TensorRole::buffer:  // an updated version (batch norm's running statistics) is produced by an op
    case TensorRole::parameter:
    case TensorRole::optimizer_state: return !t.updates.valid();  // an updated version is produced by the optimizer
    case TensorRole::activation:
    case TensorRole::gradient: return false;
  }
  return false;
}

Expected<void> check_source_list(const Graph& graph, const std::vector<TensorId>& list, TensorRole role,
                                 std::string_view what) {
  std::vector<char> listed(graph.tensors.size(), 0);
  for (TensorId id : list) {
    const FullTensor& t = graph.tensor(id);
    if (t.role != role || t.updates.valid())
      return fail(fmt::format("tensor '{}' (%{}) is in the graph's {} list but has role {}{}", t.name, id.value, what,
                              name(t.role), t.updates.valid() ? " and is an updated version" : ""),
                  fmt::format("list only {} tensors there", name(role)));
    if (listed[id.index()]) return fail(fmt::format("tensor '{}' (%{}) is listed twice as a graph {}", t.name, id.value, what));
    listed[id.index()] = 1;
  }
  for (const FullTensor& t : graph.tensors)
    if (t.role == role && !t.updates.valid() && !listed[t.id.index()])
      return fail(fmt::format("tensor '{}' (%{}) has role {} but is not in the graph's {} list", t.name, t.id.value,
                              name(role), what),
                  fmt::format("add it to the {} list or change its role", what));
  return {};
}

Expected<void> check_roles(const Graph& graph, const std::vector<OpId>& producer) {
  LOOM_RETURN_IF_ERROR(check_source_list(graph, graph.inputs, TensorRole::input, "input"));
  LOOM_RETURN_IF_ERROR(check_source_list(graph, graph.parameters, TensorRole::parameter, "parameter"));
  for (const FullTensor& t : graph.tensors) {
    const bool produced = producer[t.id.index()].valid();
    const std::string label = fmt::format("tensor '{}' (%{})", t.name, t.id.value);
    // (A produced leaf is already a double write for check_structure.)
    if (!produced && !is_leaf_role(t))
      return fail(fmt::format("{} has role {}{} but no op produces it", label, name(t.role),
                              t.updates.valid() ? " and updates another tensor" : ""));
    if (t.role == TensorRole::gradient) {
      if (!t.owner.valid())
        return fail(fmt::format("gradient {} has no owner", label), "set owner to the tensor it is the gradient of");
      const FullTensor& owner = graph.tensor(t.owner);
      if (owner.shape != t.shape)
        return fail(fmt::format("gradient {} has shape {}, but the tensor it is the gradient of, '{}', has shape {}",
                                label, t.shape.to_string(), owner.name, owner.shape.to_string()));
    }
    if (t.role == TensorRole::optimizer_state &&
        (!t.owner.valid() || graph.tensor(t.owner).role != TensorRole::parameter))
      return fail(fmt::format("optimizer state {} must name its parameter as owner", label));
    if (t.role != TensorRole::gradient && t.role != TensorRole::optimizer_state && t.owner.valid())
      return fail(fmt::format("{} has role {} and an owner; only gradients and optimizer states have one", label,
                              name(t.role)));
    if (t.updates.valid()) {
      const FullTensor& old = graph.tensor(t.updates);
      if (t.role != TensorRole::parameter && t.role != TensorRole::optimizer_state && t.role != TensorRole::buffer)
        return fail(fmt::format("{} has role {} but updates '{}'; only parameters, optimizer states and buffers are "
                                "updated",
                                label, name(t.role), old.name));
      if (old.role != t.role || old.shape != t.shape || old.dtype != t.dtype)
        return fail(fmt::format("{} ({} {}{}) updates '{}', which is {} {}{}", label, name(t.role), name(t.dtype),
                                t.shape.to_string(), old.name, name(old.role), name(old.dtype), old.shape.to_string()));
    }
  }
  return {};
}

// An op that mirrors nothing: its type, applied to the recorded inputs, must give the recorded outputs.
Expected<void> check_resolved(const Graph& graph, const Op& op, const OpDef& def) {
  std::vector<Shape> shapes;
  std::vector<DType> dtypes;
  for (TensorId in : op.inputs) {
    shapes.push_back(graph.tensor(in).shape);
    dtypes.push_back(graph.tensor(in).dtype);
  }
  const std::string label = op_label(op);
  Expected<ResolvedOp> resolved = resolve_op(def, op.attrs, shapes, dtypes);
  if (!resolved) return std::unexpected(with_context(std::move(resolved).error(), label));
  if (resolved->output_shapes.size() != op.outputs.size())
    return fail(fmt::format("{} records {} outputs, but its type gives {}", label, op.outputs.size(),
                            resolved->output_shapes.size()));
  for (std::size_t k = 0; k < op.outputs.size(); ++k) {
    const FullTensor& out = graph.tensor(op.outputs[k]);
    if (out.shape != resolved->output_shapes[k])
      return fail(fmt::format("{} output {} ('{}'): recorded shape {}, but the inputs give {}", label, k, out.name,
                              out.shape.to_string(), resolved->output_shapes[k].to_string()),
                  "the graph was edited or written by an out-of-date tool; rebuild it");
    if (out.dtype != resolved->output_dtypes[k])
      return fail(fmt::format("{} output {} ('{}'): recorded dtype {}, but the inputs give {}", label, k, out.name,
                              name(out.dtype), name(resolved->output_dtypes[k])));
  }
  if (op.annotation != resolved->annotation_text) {
    // Spelling may differ (spaces); the meaning may not.
    Expected<Annotation> recorded = parse_annotation(op.annotation);
    if (!recorded) return std::unexpected(with_context(std::move(recorded).error(), label + ": recorded annotation"));
    if (*recorded != resolved->annotation)
      return fail(fmt::format("{}: recorded annotation '{}', but its type gives '{}'", label, op.annotation,
                              resolved->annotation_text));
  }
  return {};
}

// A backward op mirroring a forward op: inputs are the saved tensors then the gradients of the forward
// outputs listed in grad_outputs; outputs are the gradients of the forward inputs listed in grad_inputs.
Expected<void> check_mirror(const Graph& graph, const Op& op) {
  const std::string label = op_label(op);
  const Op& forward = graph.op(op.mirror_of);
  if (forward.pass != Pass::forward)
    return fail(fmt::format("{} mirrors op '{}', which is a {} op; a backward op mirrors a forward op", label,
                            forward.name, name(forward.pass)));
  if (forward.type != op.type)
    return fail(fmt::format("{} mirrors op '{}' of type '{}'; a backward op has the type of the op it mirrors", label,
                            forward.name, forward.type));
  if (forward.annotation != op.annotation)
    return fail(fmt::format("{} has annotation '{}', but the op it mirrors, '{}', has '{}'", label, op.annotation,
                            forward.name, forward.annotation),
                "a backward op carries the annotation of its forward op, so plans transform both alike");
  Expected<MirrorLayout> decoded = mirror_layout(op);
  if (!decoded) return std::unexpected(with_context(std::move(decoded).error(), label));
  const MirrorLayout& layout = *decoded;

  std::vector<TensorId> expected_inputs;
  if (layout.saved_inputs) expected_inputs = forward.inputs;
  if (layout.saved_outputs) expected_inputs.insert(expected_inputs.end(), forward.outputs.begin(), forward.outputs.end());
  const std::size_t saved = expected_inputs.size();
  const std::size_t want_inputs = saved + layout.grad_outputs.size();
  if (op.inputs.size() != want_inputs)
    return fail(fmt::format("{} has {} inputs, but its layout wants {} saved tensors and {} output gradients", label,
                            op.inputs.size(), saved, layout.grad_outputs.size()));
  for (std::size_t k = 0; k < saved; ++k)
    if (op.inputs[k] != expected_inputs[k])
      return fail(fmt::format("{} input {} is '{}', but the saved tensor there is '{}' of op '{}'", label, k,
                              graph.tensor(op.inputs[k]).name, graph.tensor(expected_inputs[k]).name, forward.name));

  // Gradient of forward tensor `target` at backward tensor `grad`: same shape and dtype, owned by it.
  const auto check_gradient = [&](TensorId grad, TensorId target, std::string_view where) -> Expected<void> {
    const FullTensor& g = graph.tensor(grad);
    const FullTensor& t = graph.tensor(target);
    if (g.shape != t.shape || g.dtype != t.dtype)
      return fail(fmt::format("{} {} ('{}') is {}{}, but it is the gradient of '{}', which is {}{}", label, where, g.name,
                              name(g.dtype), g.shape.to_string(), t.name, name(t.dtype), t.shape.to_string()));
    if (g.role != TensorRole::gradient || g.owner != target)
      return fail(fmt::format("{} {} ('{}') must be a gradient owned by '{}'", label, where, g.name, t.name));
    return {};
  };
  for (std::size_t k = 0; k < layout.grad_outputs.size(); ++k) {
    const int j = layout.grad_outputs[k];
    if (j < 0 || static_cast<std::size_t>(j) >= forward.outputs.size())
      return fail(fmt::format("{}: grad_outputs names output {}, but op '{}' has {} outputs", label, j, forward.name,
                              forward.outputs.size()));
    LOOM_RETURN_IF_ERROR(check_gradient(op.inputs[saved + k], forward.outputs[static_cast<std::size_t>(j)],
                                        fmt::format("input {}", saved + k)));
  }
  if (op.outputs.size() != layout.grad_inputs.size())
    return fail(fmt::format("{} has {} outputs, but grad_inputs lists {} input gradients", label, op.outputs.size(),
                            layout.grad_inputs.size()));
  for (std::size_t k = 0; k < op.outputs.size(); ++k) {
    const int i = layout.grad_inputs[k];
    if (i < 0 || static_cast<std::size_t>(i) >= forward.inputs.size())
      return fail(fmt::format("{}: grad_inputs names input {}, but op '{}' has {} inputs", label, i, forward.name,
                              forward.inputs.size()));
    const TensorId target = forward.inputs[static_cast<std::size_t>(i)];
    LOOM_RETURN_IF_ERROR(check_gradient(op.outputs[k], target, fmt::format("output {}", k)));
    const bool parameter = graph.tensor(target).role == TensorRole::parameter;
    if ((layout.part == GradPart::weight && !parameter) || (layout.part == GradPart::input && parameter))
      return fail(fmt::format("{} is the {} part, but output {} is the gradient of {} '{}'", label, name(layout.part), k,
                              parameter ? "parameter" : "non-parameter", graph.tensor(target).name),
                  "the weight part computes the parameters' gradients, the input part the others");
  }
  return {};
}

Expected<void> check_ops(const Graph& graph, const OpCatalog& catalog) {
  std::vector<std::vector<OpId>> mirrored_by(graph.ops.size());
  for (const Op& op : graph.ops) {
    const OpDef* def = catalog.find(op.type);
    if (def == nullptr)
      return fail(fmt::format("op '{}' has unknown type '{}'", op.name, op.type), "`loom ops` lists the known types");
    if (!op.is_mirror()) {
      LOOM_RETURN_IF_ERROR(check_resolved(graph, op, *def));
      continue;
    }
    if (op.pass != Pass::backward)
      return fail(fmt::format("{} is a {} op but mirrors op #{}; only backward ops mirror", op_label(op), name(op.pass),
                              op.mirror_of.value));
    LOOM_RETURN_IF_ERROR(check_mirror(graph, op));
    // A forward op has one backward op, or one input part and one weight part (split_weight_gradients).
    const GradPart part = grad_part(op);
    auto& by = mirrored_by[op.mirror_of.index()];
    const auto clash = [&](OpId other) { return other.valid() && (part == GradPart::whole || grad_part(graph.op(other)) == GradPart::whole || grad_part(graph.op(other)) == part); };
    for (OpId other : by)
      if (clash(other))
        return fail(fmt::format("op '{}' is mirrored by both '{}' and '{}'; a forward op has one backward op, or one "
                                "input part and one weight part",
                                graph.op(op.mirror_of).name, graph.op(other).name, op.name));
    by.push_back(op.id);
  }
  return {};
}

}  // namespace

Expected<void> validate_graph(const Graph& graph, const OpCatalog& catalog) {
  LOOM_RETURN_IF_ERROR(check_structure(graph));
  const std::vector<OpId> producer = producers(graph);
  LOOM_RETURN_IF_ERROR(check_roles(graph, producer));
  LOOM_RETURN_IF_ERROR(check_ops(graph, catalog));
  if (graph.loss.valid() && !producer[graph.loss.index()].valid())
    return fail(fmt::format("the loss '{}' is not produced by any op", graph.tensor(graph.loss).name),
                "the loss must be computed from the parameters");
  return {};
}

}  // namespace loom::ir
