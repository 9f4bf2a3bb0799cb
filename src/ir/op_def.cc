#include "loom/ir/op_def.h"

#include <algorithm>
#include <array>

#include <fmt/ranges.h>

namespace loom::ir {

std::string_view name(OpClass op_class) {
  static constexpr std::array<std::string_view, 10> kNames = {
      "contraction", "elementwise",   "reduction", "normalization", "attention",
      "convolution", "data_movement", "embedding", "loss",          "optimizer"};
  return kNames[static_cast<std::size_t>(op_class)];
}

namespace {

Expected<void> check_attrs(const OpDef& def, const Attrs& attrs) {
  for (const auto& [key, value] : attrs) {
    const AttrSpec* spec = nullptr;
    for (const AttrSpec& s : def.attrs)
      if (s.name == key) spec = &s;
    if (spec == nullptr) {
      std::vector<std::string> known;
      for (const AttrSpec& s : def.attrs) known.push_back(s.name);
      return fail(fmt::format("op type '{}' has no attribute '{}'", def.type, key),
                  known.empty() ? std::string("it takes no attributes")
                                : fmt::format("its attributes are: {}", fmt::join(known, ", ")));
    }
    const AttrKind kind = kind_of(value);
    const bool integer_as_real = spec->kind == AttrKind::real && kind == AttrKind::integer;
    if (kind != spec->kind && !integer_as_real)
      return fail(fmt::format("attribute '{}' of op type '{}' must be {} but is {} ({})", key, def.type,
                              name(spec->kind), name(kind), to_string(value)),
                  fmt::format("give '{}' a {} value: {}", key, name(spec->kind), spec->doc));
    // Integers are sizes, strides, paddings, dims, seeds: none exceeds the largest tensor, and the bound
    // keeps the signatures' sums and differences of them from wrapping.
    const auto too_large = [](std::int64_t v) { return v > kMaxElements || v < -kMaxElements; };
    bool out_of_range = false;
    if (const auto* integer = std::get_if<std::int64_t>(&value)) out_of_range = too_large(*integer);
    if (const auto* list = std::get_if<std::vector<std::int64_t>>(&value))
      out_of_range = std::any_of(list->begin(), list->end(), too_large);
    if (out_of_range)
      return fail(fmt::format("attribute '{}' of op type '{}' holds {}, beyond Loom's limit of 2^48 in magnitude", key,
                              def.type, to_string(value)));
  }
  for (const AttrSpec& spec : def.attrs)
    if (spec.required && !attrs.contains(spec.name))
      return fail(fmt::format("op type '{}' needs attribute '{}' ({})", def.type, spec.name, spec.doc),
                  fmt::format("add \"{}\", a {} value, to the op's \"attrs\"", spec.name, name(spec.kind)));
  return {};
}

}  // namespace

Expected<ResolvedOp> resolve_op(const OpDef& def, const Attrs& attrs, std::span<const Shape> input_shapes,
                                std::span<const DType> input_dtypes) {
  LOOM_RETURN_IF_ERROR(check_attrs(def, attrs));
  LOOM_ASSIGN_OR_RETURN(OpSignature signature, def.signature(OpCall{attrs, input_shapes, input_dtypes}));
  ResolvedOp resolved;
  LOOM_ASSIGN_OR_RETURN(resolved.annotation, parse_annotation(signature.annotation));
  resolved.annotation_text = std::move(signature.annotation);
  LOOM_ASSIGN_OR_RETURN(resolved.dims, bind_dims(resolved.annotation, input_shapes, signature.sizes));
  LOOM_ASSIGN_OR_RETURN(resolved.output_shapes, output_shapes(resolved.annotation, resolved.dims));
  if (signature.output_dtypes.empty()) {
    DType dtype = input_dtypes.empty() ? DType::f32 : input_dtypes.front();
    for (DType d : input_dtypes)
      if (is_floating(d)) {
        dtype = d;
        break;
      }
    resolved.output_dtypes.assign(resolved.output_shapes.size(), dtype);
  } else {
    if (signature.output_dtypes.size() != resolved.output_shapes.size())
      return fail(fmt::format("op type '{}' gives {} output dtypes for {} outputs", def.type,
                              signature.output_dtypes.size(), resolved.output_shapes.size()));
    resolved.output_dtypes = std::move(signature.output_dtypes);
  }
  return resolved;
}

double forward_flops(const OpDef& def, const Attrs& attrs, std::span<const Shape> input_shapes,
                     std::span<const DType> input_dtypes, const ResolvedOp& resolved) {
  if (!def.flops) return 0;
  return def.flops(OpInstance{attrs, input_shapes, resolved.output_shapes, input_dtypes, resolved.output_dtypes,
                              resolved.dims});
}

double forward_bytes(const OpDef& def, const Attrs& attrs, std::span<const Shape> input_shapes,
                     std::span<const DType> input_dtypes, const ResolvedOp& resolved) {
  const OpInstance instance{attrs, input_shapes, resolved.output_shapes, input_dtypes, resolved.output_dtypes,
                            resolved.dims};
  if (def.bytes) return def.bytes(instance);
  double bytes = 0;
  for (std::size_t i = 0; i < input_shapes.size(); ++i)
    bytes += static_cast<double>(input_shapes[i].numel() * size_bytes(input_dtypes[i]));
  for (std::size_t i = 0; i < resolved.output_shapes.size(); ++i)
    bytes += static_cast<double>(resolved.output_shapes[i].numel() * size_bytes(resolved.output_dtypes[i]));
  return bytes;
}

SignatureFn fixed_signature(std::string annotation) {
  return [annotation = std::move(annotation)](const OpCall&) -> Expected<OpSignature> {
    return OpSignature{annotation, {}, {}};
  };
}

CostFn contraction_flops() {
  return [](const OpInstance& op) { return 2.0 * op.dims.iteration_space(); };
}

CostFn flops_per_output_element(double per_element) {
  return [per_element](const OpInstance& op) {
    return op.outputs.empty() ? 0.0 : per_element * static_cast<double>(op.outputs[0].numel());
  };
}

CostFn flops_per_input_element(double per_element) {
  return [per_element](const OpInstance& op) {
    return op.inputs.empty() ? 0.0 : per_element * static_cast<double>(op.inputs[0].numel());
  };
}

CostFn no_flops() {
  return [](const OpInstance&) { return 0.0; };
}

}  // namespace loom::ir
