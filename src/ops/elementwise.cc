// Pointwise math. Binary ops broadcast like numpy; their annotation is generated per instance so a
// broadcast (size-1) dim becomes the number 1 and only real dims are named, hence splittable.
#include "loom/ops/families.h"
#include "loom/ops/signature_helpers.h"

namespace loom::ops {
namespace {

using ir::OpCall;
using ir::OpSignature;

// Every input broadcasts against every other; `names` describes the inputs for messages.
ir::SignatureFn broadcast_signature(std::string op, std::size_t inputs, std::string names) {
  return [op = std::move(op), inputs, names = std::move(names)](const OpCall& call) -> Expected<OpSignature> {
    LOOM_RETURN_IF_ERROR(expect_inputs(call, inputs, inputs, op, names));
    LOOM_ASSIGN_OR_RETURN(Broadcast b, broadcast_dims(call.input_shapes, op));
    return OpSignature{annotation_text(b.inputs, {b.output}), {}, {}};
  };
}

ir::OpDef binary(std::string type, std::string summary, double flops, bool saves_inputs) {
  return {.type = type,
          .family = "elementwise",
          .summary = std::move(summary),
          .op_class = ir::OpClass::elementwise,
          .signature = broadcast_signature(type, 2, "two inputs (a, b)"),
          .flops = ir::flops_per_output_element(flops),
          .backward = {.saves_inputs = saves_inputs, .flops_factor = 1.0}};
}

// "* -> *": the same shape in and out, every dim splittable.
ir::OpDef unary(std::string type, std::string summary, double flops, ir::BackwardRule backward = {},
                std::vector<ir::AttrSpec> attrs = {}) {
  backward.flops_factor = 1.0;
  return {.type = std::move(type),
          .family = "elementwise",
          .summary = std::move(summary),
          .op_class = ir::OpClass::elementwise,
          .attrs = std::move(attrs),
          .signature = ir::fixed_signature("* -> *"),
          .flops = ir::flops_per_output_element(flops),
          .backward = backward};
}

Expected<OpSignature> cast_signature(const OpCall& call) {
  LOOM_RETURN_IF_ERROR(expect_inputs(call, 1, 1, "cast", "one input (x)"));
  // Checked in place: a std::string through LOOM_ASSIGN_OR_RETURN trips g++ 12 -Wmaybe-uninitialized.
  const Expected<std::string> dtype_name = ir::get_string(call.attrs, "dtype");
  if (!dtype_name) return std::unexpected(dtype_name.error());
  const Expected<ir::DType> dtype = ir::parse_dtype(*dtype_name);
  if (!dtype)
    return fail(fmt::format("cast: attribute 'dtype' = '{}' is not a dtype", *dtype_name), "e.g. 'f32', 'bf16', 'i64'");
  return OpSignature{"* -> *", {}, {*dtype}};
}

Expected<OpSignature> clamp_signature(const OpCall& call) {
  LOOM_RETURN_IF_ERROR(expect_inputs(call, 1, 1, "clamp", "one input (x)"));
  if (call.attrs.contains("min") && call.attrs.contains("max")) {
    LOOM_ASSIGN_OR_RETURN(double lo, ir::get_real(call.attrs, "min"));
    LOOM_ASSIGN_OR_RETURN(double hi, ir::get_real(call.attrs, "max"));
    if (lo > hi) return fail(fmt::format("clamp: min {} is greater than max {}", lo, hi));
  }
  return OpSignature{"* -> *", {}, {}};
}

// torch.remainder by a number: the divisor's sign, as Python's %; a zero divisor has no result.
Expected<OpSignature> remainder_signature(const OpCall& call) {
  LOOM_RETURN_IF_ERROR(expect_inputs(call, 1, 1, "remainder", "one input (x)"));
  LOOM_ASSIGN_OR_RETURN(double divisor, ir::get_real(call.attrs, "divisor"));
  if (divisor == 0) return fail("remainder: attribute 'divisor' is 0", "x % 0 has no value; give a non-zero divisor");
  return OpSignature{"* -> *", {}, {}};
}

Expected<OpSignature> where_signature(const OpCall& call) {
  LOOM_RETURN_IF_ERROR(expect_inputs(call, 3, 3, "where", "three inputs (cond, a, b)"));
  LOOM_RETURN_IF_ERROR(expect_boolean(call, 0, "where", "cond"));
  LOOM_ASSIGN_OR_RETURN(Broadcast b, broadcast_dims(call.input_shapes, "where"));
  // The values' dtype, not the condition's (the default, input 0's, would make every result boolean).
  std::vector<ir::DType> dtypes;
  if (call.input_dtypes.size() == 3) dtypes.push_back(call.input_dtypes[1]);
  return OpSignature{annotation_text(b.inputs, {b.output}), {}, std::move(dtypes)};
}

// The mask broadcasts to x, never the other way round: the output keeps x's shape.
Expected<OpSignature> masked_fill_signature(const OpCall& call) {
  LOOM_RETURN_IF_ERROR(expect_inputs(call, 2, 2, "masked_fill", "two inputs (x, mask)"));
  LOOM_RETURN_IF_ERROR(expect_boolean(call, 1, "masked_fill", "mask"));
  LOOM_ASSIGN_OR_RETURN(Broadcast b, broadcast_dims(call.input_shapes, "masked_fill"));
  if (b.output.size() != call.input_shapes[0].rank() || b.inputs[0] != b.output)
    return fail(fmt::format("masked_fill: mask {} would broadcast x {} to a larger shape",
                            call.input_shapes[1].to_string(), call.input_shapes[0].to_string()),
                "the mask must broadcast to x's shape");
  return OpSignature{annotation_text(b.inputs, {b.output}), {}, {}};
}

}  // namespace

void register_elementwise_ops(OpRegistry& r) {
  // add/sub backward only passes the output gradient on (reduced over broadcast dims).
  r.add_builtin(binary("add", "a + b, numpy broadcasting", 1, false));
  r.add_builtin(binary("sub", "a - b, numpy broadcasting", 1, false));
  r.add_builtin(binary("mul", "a * b, numpy broadcasting", 1, true));
  r.add_builtin(binary("div", "a / b, numpy broadcasting", 1, true));

  r.add_builtin(unary("scale", "x * factor", 1, {.saves_inputs = false},
                      {{"factor", ir::AttrKind::real, true, "the constant multiplier"}}));
  r.add_builtin(unary("neg", "-x", 1, {.saves_inputs = false}));
  r.add_builtin(unary("exp", "e^x", 1, {.saves_inputs = false, .saves_outputs = true}));
  r.add_builtin(unary("log", "natural logarithm", 1));
  r.add_builtin(unary("sqrt", "square root", 1, {.saves_inputs = false, .saves_outputs = true}));
  r.add_builtin(unary("rsqrt", "1 / sqrt(x)", 2, {.saves_inputs = false, .saves_outputs = true}));
  r.add_builtin(unary("tanh", "hyperbolic tangent", 4, {.saves_inputs = false, .saves_outputs = true}));
  r.add_builtin(unary("sigmoid", "1 / (1 + e^-x)", 3, {.saves_inputs = false, .saves_outputs = true}));
  r.add_builtin(unary("abs", "|x|", 1));
  r.add_builtin(unary("reciprocal", "1 / x", 1, {.saves_inputs = false, .saves_outputs = true}));
  r.add_builtin(unary("acos", "arc cosine, x in [-1, 1]", 4));
  r.add_builtin({.type = "remainder",
                 .family = "elementwise",
                 .summary = "x - floor(x / divisor) * divisor (Python's %, the divisor's sign), e.g. hashed ids",
                 .op_class = ir::OpClass::elementwise,
                 .attrs = {{"divisor", ir::AttrKind::real, true, "the constant divisor, non-zero"}},
                 .signature = remainder_signature,
                 .flops = ir::flops_per_output_element(3),
                 .backward = {.saves_inputs = false, .flops_factor = 1.0}});
  r.add_builtin(unary("square", "x * x", 1));
  r.add_builtin(unary("pow", "x ^ exponent", 1, {},
                      {{"exponent", ir::AttrKind::real, true, "the constant exponent"}}));
  r.add_builtin({.type = "clamp",
                 .family = "elementwise",
                 .summary = "clamp x into [min, max]; either bound may be absent",
                 .op_class = ir::OpClass::elementwise,
                 .attrs = {{"min", ir::AttrKind::real, false, "lower bound"},
                           {"max", ir::AttrKind::real, false, "upper bound"}},
                 .signature = clamp_signature,
                 .flops = ir::flops_per_output_element(2),
                 .backward = {.flops_factor = 1.0}});
  r.add_builtin({.type = "where",
                 .family = "elementwise",
                 .summary = "cond ? a : b, numpy broadcasting",
                 .op_class = ir::OpClass::elementwise,
                 .signature = where_signature,
                 .flops = ir::flops_per_output_element(1),
                 .backward = {.no_grad_inputs = {0}, .flops_factor = 1.0}});
  r.add_builtin({.type = "masked_fill",
                 .family = "elementwise",
                 .summary = "x with value where the (broadcast) mask is true",
                 .op_class = ir::OpClass::elementwise,
                 .attrs = {{"value", ir::AttrKind::real, true, "the fill value, e.g. -1e9 before a softmax"}},
                 .signature = masked_fill_signature,
                 .flops = ir::flops_per_output_element(1),
                 .backward = {.no_grad_inputs = {1}, .flops_factor = 1.0}});
  r.add_builtin({.type = "cast",
                 .family = "elementwise",
                 .summary = "convert x to another dtype",
                 .op_class = ir::OpClass::elementwise,
                 .attrs = {{"dtype", ir::AttrKind::string, true, "the output dtype, e.g. 'f32'"}},
                 .signature = cast_signature,
                 .flops = ir::no_flops(),
                 .backward = {.saves_inputs = false, .flops_factor = 1.0}});
}

}  // namespace loom::ops
