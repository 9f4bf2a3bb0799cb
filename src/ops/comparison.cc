// Elementwise comparisons (eq, ne, lt, le, gt, ge): numpy broadcasting like the binary arithmetic ops,
// a boolean output, and no gradient (the result is piecewise constant in both inputs). Also the
// selections they imply, maximum and minimum, whose gradient goes to the selected input.
#include "loom/ops/families.h"
#include "loom/ops/signature_helpers.h"

namespace loom::ops {
namespace {

using ir::OpCall;
using ir::OpSignature;

ir::SignatureFn comparison_signature(std::string op) {
  return [op = std::move(op)](const OpCall& call) -> Expected<OpSignature> {
    LOOM_RETURN_IF_ERROR(expect_inputs(call, 2, 2, op, "two inputs (a, b)"));
    LOOM_ASSIGN_OR_RETURN(Broadcast b, broadcast_dims(call.input_shapes, op));
    return OpSignature{annotation_text(b.inputs, {b.output}), {}, {ir::DType::boolean}};
  };
}

ir::OpDef comparison(std::string type, std::string summary) {
  return {.type = type,
          .family = "comparison",
          .summary = std::move(summary),
          .op_class = ir::OpClass::elementwise,
          .signature = comparison_signature(type),
          .flops = ir::flops_per_output_element(1),
          .backward = {.differentiable = false, .saves_inputs = false}};
}

ir::OpDef selection(std::string type, std::string summary) {
  return {.type = type,
          .family = "comparison",
          .summary = std::move(summary),
          .op_class = ir::OpClass::elementwise,
          .signature = [type](const OpCall& call) -> Expected<OpSignature> {
            LOOM_RETURN_IF_ERROR(expect_inputs(call, 2, 2, type, "two inputs (a, b)"));
            LOOM_ASSIGN_OR_RETURN(Broadcast b, broadcast_dims(call.input_shapes, type));
            return OpSignature{annotation_text(b.inputs, {b.output}), {}, {}};
          },
          .flops = ir::flops_per_output_element(1),
          .backward = {.flops_factor = 1.0}};
}

}  // namespace

void register_comparison_ops(OpRegistry& r) {
  r.add_builtin(comparison("eq", "a == b as booleans, numpy broadcasting"));
  r.add_builtin(comparison("ne", "a != b as booleans, numpy broadcasting (e.g. ids != padding id)"));
  r.add_builtin(comparison("lt", "a < b as booleans, numpy broadcasting"));
  r.add_builtin(comparison("le", "a <= b as booleans, numpy broadcasting"));
  r.add_builtin(comparison("gt", "a > b as booleans, numpy broadcasting"));
  r.add_builtin(comparison("ge", "a >= b as booleans, numpy broadcasting"));
  r.add_builtin(selection("maximum", "the larger of a and b, numpy broadcasting (ties: half the gradient each)"));
  r.add_builtin(selection("minimum", "the smaller of a and b, numpy broadcasting (ties: half the gradient each)"));
}

}  // namespace loom::ops
