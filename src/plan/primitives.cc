#include "loom/plan/primitives.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "loom/ir/autograd.h"
#include "loom/plan/recompute.h"

namespace loom::plan {
namespace {

// Where identifier x sits in one tensor: the dimension it names (alone or first of a merged dim),
// -1 when absent; an error when it is a later atom of a merged dim (that cannot be split).
Expected<int> dim_of(const ir::TensorAnnotation& tensor, std::string_view x, std::string_view where) {
  if (tensor.opaque) return -1;
  for (std::size_t d = 0; d < tensor.dims.size(); ++d) {
    const auto& atoms = tensor.dims[d].atoms;
    for (std::size_t a = 0; a < atoms.size(); ++a) {
      if (atoms[a].kind != ir::DimAtom::Kind::identifier || atoms[a].name != x) continue;
      if (a > 0)
        return fail(fmt::format("'{}' is not the first identifier of the merged dimension {} of {}; only the first may be split",
                                x, to_string(ir::TensorAnnotation{false, {tensor.dims[d]}}), where));
      return static_cast<int>(d);
    }
  }
  return -1;
}

// How one trans changes each tensor of the op.
struct SplitShape {
  bool replicate = false;
  bool value_split = false;         // every input and output becomes value part k of n
  bool redundant_backward = false;  // replicas compute whole gradients
  bool reduce = false;
  bool strided = false;
  std::vector<int> input_dims;   // split dim per input, -1 if the identifier is absent
  std::vector<int> output_dims;  // per output
  std::vector<bool> additive;    // per input
};

Expected<SplitShape> describe(const Plan& plan, const SubOp& original, const TransAlgo& algo, int n) {
  const OpLayout& layout = plan.layouts[original.op.index()];
  SplitShape split;
  split.input_dims.assign(layout.annotation.inputs.size(), -1);
  split.output_dims.assign(layout.annotation.outputs.size(), -1);
  split.additive.assign(layout.annotation.inputs.size(), false);
  for (int i : layout.additive_inputs)
    if (i >= 0 && static_cast<std::size_t>(i) < split.additive.size()) split.additive[static_cast<std::size_t>(i)] = true;
  if (std::holds_alternative<ValueSplitAlgo>(algo)) {
    if (!layout.linear)
      return fail(fmt::format("trans: op '{}' ({}) is not linear in all its inputs, so it cannot be split by value",
                              original.name, plan.graph->op(original.op).type),
                  "split an identifier or replicate it");
    if (original.mirror.valid() || original.weight_mirror.valid())
      return fail(fmt::format("trans: op '{}' has a backward part; a value split would give every part the whole gradient",
                              original.name),
                  "split an identifier or replicate it");
    split.value_split = true;
    return split;
  }
  if (std::holds_alternative<ReplicateAlgo>(algo)) {
    split.replicate = true;
    split.redundant_backward = std::get<ReplicateAlgo>(algo).redundant_backward;
    return split;
  }
  const SplitAlgo& s = std::get<SplitAlgo>(algo);
  const std::string text = to_string(layout.annotation);
  const std::vector<std::string> names = layout.annotation.identifiers();
  if (std::find(names.begin(), names.end(), s.identifier) == names.end())
    return fail(fmt::format("op '{}' has no identifier '{}' in its annotation '{}'", original.name, s.identifier, text),
                fmt::format("split one of: {}", fmt::join(names, ", ")));
  const ir::DimFlag flag = layout.annotation.flag_of(s.identifier);
  if (flag == ir::DimFlag::frozen)
    return fail(fmt::format("identifier '{}' of op '{}' is frozen ('^' in '{}') and cannot be split", s.identifier,
                            original.name, text),
                "the op is not linear along it; split another identifier");
  split.reduce = flag == ir::DimFlag::reduce;
  split.strided = s.strided;
  bool in_output = false;
  const auto locate = [&](const std::vector<ir::TensorAnnotation>& side, std::vector<int>& dims,
                          const std::vector<SubTensor>& tensors, const char* kind) -> Expected<void> {
    for (std::size_t t = 0; t < side.size(); ++t) {
      const std::string where = fmt::format("{} {} of op '{}'", kind, t, original.name);
      LOOM_ASSIGN_OR_RETURN(dims[t], dim_of(side[t], s.identifier, where));
      if (dims[t] < 0) continue;
      const auto d = static_cast<std::size_t>(dims[t]);
      if (s.strided && side[t].dims[d].merged())
        return fail(fmt::format("'{}' starts a merged dimension of {}; a strided split would not be one range", s.identifier, where),
                    "split it evenly (strided = false)");
      const std::int64_t size = tensors[t].box[d].size();
      if (size % n != 0)
        return fail(fmt::format("'{}' has {} elements in {} ({}), not divisible into {} parts", s.identifier, size, where,
                                tensors[t].to_string(), n));
    }
    return {};
  };
  LOOM_RETURN_IF_ERROR(locate(layout.annotation.inputs, split.input_dims, original.inputs, "input"));
  LOOM_RETURN_IF_ERROR(locate(layout.annotation.outputs, split.output_dims, original.outputs, "output"));
  for (int d : split.output_dims) in_output |= d >= 0;
  if (!split.reduce && !in_output)
    return fail(fmt::format("identifier '{}' of op '{}' reaches no output of '{}', so splitting it has no meaning",
                            s.identifier, original.name, text),
                "an identifier summed away must be marked '+' (linear) or '^' (not splittable)");
  return split;
}

// The gradient of input i comes out as a value part when the part saw that input only partially:
// every input of a replica (unless it computes whole gradients), an input lacking a plain split
// identifier, a multiplying input lacking a reduced one (additive inputs such as biases get their whole
// gradient in every part).
bool gradient_divided(const SplitShape& split, std::size_t i) {
  if (split.replicate) return !split.redundant_backward;
  const bool sliced = split.input_dims[i] >= 0;
  return !sliced && (!split.reduce || !split.additive[i]);
}

void slice(SubTensor& tensor, int dim, int n, int k, bool strided) {
  if (dim < 0) return;
  auto& range = tensor.box[static_cast<std::size_t>(dim)];
  range = split_range(range, n, k, strided);
}

SubOp new_part(Plan& plan, const SubOp& original, int n, int k) {
  SubOp part = original;
  part.id = SubOpId(static_cast<std::uint32_t>(plan.sub_ops.size()));
  part.name = fmt::format("{}[{}/{}]", original.name, k, n);
  part.mirror = {};
  part.weight_mirror = {};
  part.live = true;
  return part;
}

// The k-th part of the forward sub-op.
SubOp forward_part(Plan& plan, const SubOp& original, const SplitShape& split, int n, int k) {
  SubOp part = new_part(plan, original, n, k);
  const ValuePart kth{k, n};
  if (split.value_split) {
    for (SubTensor& in : part.inputs) in.value = nested(in.value, kth);
    for (SubTensor& out : part.outputs) out.value = nested(out.value, kth);
    return part;
  }
  for (std::size_t i = 0; i < part.inputs.size(); ++i) {
    slice(part.inputs[i], split.input_dims[i], n, k, split.strided);
    if (split.reduce && split.input_dims[i] < 0 && split.additive[i]) part.inputs[i].value = nested(part.inputs[i].value, kth);
  }
  for (std::size_t j = 0; j < part.outputs.size(); ++j) {
    slice(part.outputs[j], split.output_dims[j], n, k, split.strided);
    if (split.reduce && split.output_dims[j] < 0) part.outputs[j].value = nested(part.outputs[j].value, kth);
  }
  return part;
}

// The k-th part of the backward sub-op, derived from the k-th forward part (see primitives.h).
Expected<SubOp> backward_part(Plan& plan, const SubOp& backward, const SubOp& forward, const SplitShape& split, int n,
                              int k) {
  LOOM_ASSIGN_OR_RETURN(ir::MirrorLayout layout, ir::mirror_layout(plan.graph->op(backward.op)));
  SubOp part = new_part(plan, backward, n, k);
  const ValuePart kth{k, n};
  std::size_t pos = 0;
  if (layout.saved_inputs)
    for (const SubTensor& in : forward.inputs) part.inputs[pos++] = in;
  if (layout.saved_outputs)
    for (const SubTensor& out : forward.outputs) part.inputs[pos++] = out;
  for (int j : layout.grad_outputs) {
    SubTensor& grad = part.inputs[pos++];
    slice(grad, split.output_dims[static_cast<std::size_t>(j)], n, k, split.strided);
    if (split.replicate && !split.redundant_backward) grad.value = nested(grad.value, kth);
  }
  for (std::size_t q = 0; q < layout.grad_inputs.size(); ++q) {
    const auto i = static_cast<std::size_t>(layout.grad_inputs[q]);
    SubTensor& grad = part.outputs[q];
    slice(grad, split.input_dims[i], n, k, split.strided);
    if (gradient_divided(split, i)) grad.value = nested(grad.value, kth);
  }
  return part;
}

// Replaces `old` in its op's live-part list by `parts`, keeping the position.
void replace_parts(Plan& plan, const SubOp& old, const std::vector<SubOpId>& parts) {
  auto& list = plan.parts[old.op.index()];
  auto it = std::find(list.begin(), list.end(), old.id);
  it = list.erase(it);
  list.insert(it, parts.begin(), parts.end());
  plan.sub_op(old.id).live = false;
}

// Value parts are identified by their interval only, so two replicas of one piece divided along
// different decompositions would carry equal labels with different contents, and no tiling could tell
// them apart. Until value parts record their lineage, dividing the value of a piece that a sibling
// part also produces, even in part (its box and value overlap: e.g. a whole bias gradient of each
// half of a reduction split, one then split along its rows), is refused. (A tensor's producers are
// the parts of one op: the graph is SSA.)
Expected<void> refuse_dividing_replicas(const Plan& plan, const SubOp& sub, const std::vector<bool>& divided) {
  for (SubOpId sibling : plan.parts[sub.op.index()]) {
    if (sibling == sub.id) continue;
    for (std::size_t j = 0; j < divided.size(); ++j)
      if (divided[j] && overlaps(plan.sub_op(sibling).outputs[j], sub.outputs[j]))
        return fail(fmt::format("trans: splitting '{}' would divide the value of '{}' {}, which '{}' also produces; value "
                                "parts of replicated pieces cannot be told apart yet",
                                sub.name, plan.graph->tensor(sub.outputs[j].tensor).name, sub.outputs[j].to_string(),
                                plan.sub_op(sibling).name),
                    "apply the splits that divide values first (e.g. the data-parallel batch split before a row-parallel "
                    "split or a replication), or split along an identifier every output has");
  }
  return {};
}

Expected<const SubOp*> live(const Plan& plan, SubOpId id, std::string_view what) {
  if (!id.valid() || id.index() >= plan.sub_ops.size()) return fail(fmt::format("{}: no sub-op ${}", what, id.value));
  const SubOp& s = plan.sub_op(id);
  if (!s.live)
    return fail(fmt::format("{}: sub-op '{}' was already transformed into parts", what, s.name),
                "apply the primitive to its parts (plan.parts of the op)");
  return &s;
}

}  // namespace

Expected<std::vector<SubOpId>> trans(Plan& plan, SubOpId id, const TransAlgo& algo, int n) {
  LOOM_ASSIGN_OR_RETURN(const SubOp* found, live(plan, id, "trans"));
  const SubOp original = *found;  // copied: sub_ops grows below
  if (plan.op_of(id).is_mirror())
    return fail(fmt::format("trans: sub-op '{}' is a backward op", original.name),
                "transform its forward op; the backward op follows");
  if (n < 1) return fail(fmt::format("trans: cannot split sub-op '{}' into {} parts", original.name, n));
  LOOM_ASSIGN_OR_RETURN(SplitShape split, describe(plan, original, algo, n));

  // The backward parts that follow the forward op: its backward (or input part B), then its weight part W.
  struct Follower {
    SubOp whole;
    bool weight = false;
    std::vector<SubOpId> parts;
  };
  std::vector<Follower> followers;
  for (const auto& [id_of, weight] : {std::pair{original.mirror, false}, std::pair{original.weight_mirror, true}})
    if (id_of.valid() && plan.sub_op(id_of).live) followers.push_back({plan.sub_op(id_of), weight, {}});
  std::vector<bool> divided_outputs(original.outputs.size(), false);
  for (std::size_t j = 0; j < divided_outputs.size(); ++j)
    divided_outputs[j] = split.value_split || (split.reduce && split.output_dims[j] < 0);
  LOOM_RETURN_IF_ERROR(refuse_dividing_replicas(plan, original, divided_outputs));
  for (const Follower& f : followers) {
    LOOM_ASSIGN_OR_RETURN(ir::MirrorLayout layout, ir::mirror_layout(plan.graph->op(f.whole.op)));
    std::vector<bool> divided_grads(f.whole.outputs.size(), false);
    for (std::size_t q = 0; q < layout.grad_inputs.size(); ++q)
      divided_grads[q] = gradient_divided(split, static_cast<std::size_t>(layout.grad_inputs[q]));
    LOOM_RETURN_IF_ERROR(refuse_dividing_replicas(plan, f.whole, divided_grads));
  }
  std::vector<SubOpId> ids;
  for (int k = 0; k < n; ++k) {
    const SubOp forward = forward_part(plan, original, split, n, k);
    plan.sub_ops.push_back(forward);
    ids.push_back(forward.id);
    for (Follower& f : followers) {
      LOOM_ASSIGN_OR_RETURN(SubOp b, backward_part(plan, f.whole, forward, split, n, k));
      b.mirror = forward.id;
      (f.weight ? plan.sub_op(forward.id).weight_mirror : plan.sub_op(forward.id).mirror) = b.id;
      f.parts.push_back(b.id);
      plan.sub_ops.push_back(std::move(b));
    }
  }
  if (is_plain_recompute(plan, original.id)) LOOM_RETURN_IF_ERROR(recompute(plan, ids));
  if (is_nested_recompute(plan, original.id)) LOOM_RETURN_IF_ERROR(recompute(plan, ids, /*nested=*/true));
  replace_parts(plan, original, ids);
  for (const Follower& f : followers) replace_parts(plan, f.whole, f.parts);
  return ids;
}

Expected<void> assign(Plan& plan, SubOpId id, int device) {
  LOOM_ASSIGN_OR_RETURN(const SubOp* s, live(plan, id, "assign"));
  if (plan.op_of(id).is_mirror())
    return fail(fmt::format("assign: sub-op '{}' is a backward op", s->name), "assign its forward op; the backward op follows");
  if (device < 0) return fail(fmt::format("assign: device {} for sub-op '{}' is negative", device, s->name));
  plan.sub_op(id).device = device;
  if (s->mirror.valid()) plan.sub_op(s->mirror).device = device;
  if (s->weight_mirror.valid()) plan.sub_op(s->weight_mirror).device = device;
  return {};
}

Expected<void> order(Plan& plan, SubOpId first, SubOpId second) {
  LOOM_RETURN_IF_ERROR(live(plan, first, "order"));
  LOOM_RETURN_IF_ERROR(live(plan, second, "order"));
  if (first == second) return fail(fmt::format("order: sub-op '{}' cannot come before itself", plan.sub_op(first).name));
  plan.orders.emplace_back(first, second);
  return {};
}

std::optional<std::string> dim_identifier(const Plan& plan, SubOpId id, bool output, std::size_t tensor, std::size_t dim) {
  const ir::Annotation& a = plan.layouts[plan.sub_op(id).op.index()].annotation;
  const auto& side = output ? a.outputs : a.inputs;
  if (tensor >= side.size() || side[tensor].opaque || dim >= side[tensor].dims.size()) return std::nullopt;
  const ir::DimAtom& atom = side[tensor].dims[dim].atoms[0];
  if (atom.kind != ir::DimAtom::Kind::identifier) return std::nullopt;
  return atom.name;
}

}  // namespace loom::plan
