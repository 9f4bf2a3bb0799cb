#include "loom/ops/custom_ops.h"

#include <cmath>
#include <set>

#include <fmt/format.h>

namespace loom::ops {
namespace {

constexpr std::string_view kFix = "fix the definition given to loom.register_op(fn, \"annotation\") (docs/custom_ops.md)";

// Output sizes are inferred from the inputs: an identifier only an output names has no size.
Expected<void> check_outputs_bound(const ir::Annotation& annotation, const std::string& label) {
  std::set<std::string, std::less<>> bound;
  bool variadic_input = false;
  for (const ir::TensorAnnotation& tensor : annotation.inputs) {
    variadic_input = variadic_input || tensor.has_variadic();
    for (const ir::AnnotatedDim& dim : tensor.dims)
      for (const ir::DimAtom& atom : dim.atoms)
        if (atom.kind == ir::DimAtom::Kind::identifier) bound.insert(atom.name);
  }
  for (const ir::TensorAnnotation& tensor : annotation.outputs) {
    if (tensor.opaque) return fail(fmt::format("{}: an output is '?'; outputs must be tensors", label), std::string(kFix));
    if (tensor.has_variadic() && !variadic_input)
      return fail(fmt::format("{}: an output uses '*' but no input does", label), std::string(kFix));
    for (const ir::AnnotatedDim& dim : tensor.dims)
      for (const ir::DimAtom& atom : dim.atoms)
        if (atom.kind == ir::DimAtom::Kind::identifier && !bound.contains(atom.name))
          return fail(fmt::format("{}: output identifier '{}' appears in no input, so its size is unknown", label,
                                  atom.name),
                      std::string(kFix));
  }
  return {};
}

bool has_reduction(const ir::Annotation& annotation) {
  for (const std::string& id : annotation.identifiers())
    if (annotation.flag_of(id) == ir::DimFlag::reduce) return true;
  return false;
}

}  // namespace

Expected<ir::OpDef> custom_op_def(const CustomOpSpec& spec) {
  const std::string label = fmt::format("custom op '{}'", spec.type);
  if (!spec.type.starts_with(kCustomOpPrefix) || spec.type.size() == kCustomOpPrefix.size())
    return fail(fmt::format("{}: a custom op type is '{}<name>'", label, kCustomOpPrefix),
                "loom.register_op names it custom.<name>; rename the type");
  Expected<ir::Annotation> annotation = ir::parse_annotation(spec.annotation);
  if (!annotation)
    return fail(fmt::format("{}: annotation '{}' does not parse: {}", label, spec.annotation, annotation.error().message),
                std::string(kFix));
  if (annotation->outputs.empty()) return fail(fmt::format("{}: the annotation has no output", label), std::string(kFix));
  LOOM_RETURN_IF_ERROR(check_outputs_bound(*annotation, label));
  if (!std::isfinite(spec.flops_per_element) || spec.flops_per_element < 0)
    return fail(fmt::format("{}: FLOPs per output element {} is not a finite number >= 0", label, spec.flops_per_element),
                "give flops= as the forward FLOPs per output element, or leave it out");
  const bool contraction = has_reduction(*annotation);
  return ir::OpDef{
      .type = spec.type,
      .family = "custom",
      .summary = fmt::format("user op with annotation '{}'", ir::to_string(*annotation)),
      .op_class = contraction ? ir::OpClass::contraction : ir::OpClass::elementwise,
      .attrs = {{std::string(kCallableAttr), ir::AttrKind::string, true,
                 "the Python function, 'module:qualname', that the runtime imports"}},
      .signature = ir::fixed_signature(ir::to_string(*annotation)),
      .flops = spec.flops_per_element > 0 ? ir::flops_per_output_element(spec.flops_per_element) : ir::no_flops(),
      .bytes = {},
      .backward = {.differentiable = spec.differentiable, .flops_factor = 2.0},
  };
}

std::string no_reference_kernel_hint(std::string_view type) {
  if (!type.starts_with(kCustomOpPrefix)) return {};
  return "a custom op (loom.register_op) is the user's Python function, which the interpreter cannot run; its "
         "check is the runtime's equivalence with the single-device plan (docs/custom_ops.md)";
}

Expected<void> CustomCatalog::add(const CustomOpSpec& spec) {
  if (base_->find(spec.type) != nullptr)
    return fail(fmt::format("custom op '{}' duplicates a built-in op type", spec.type),
                fmt::format("name it '{}<name>' (loom.register_op does)", kCustomOpPrefix));
  LOOM_ASSIGN_OR_RETURN(ir::OpDef def, custom_op_def(spec));
  if (custom_.find(spec.type) != nullptr)
    return fail(fmt::format("custom op '{}' is defined twice", spec.type), "define each custom op type once");
  return custom_.add(std::move(def));
}

const ir::OpDef* CustomCatalog::find(std::string_view type) const {
  if (const ir::OpDef* def = base_->find(type)) return def;
  return custom_.find(type);
}

}  // namespace loom::ops
