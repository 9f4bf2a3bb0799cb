// Ops the backward pass inserts itself: "accumulate" sums the partial gradients of a tensor read by
// several ops, and "fill_like" seeds the loss gradient with ones.
#include "loom/ops/families.h"
#include "uniform_annotation.h"

namespace loom::ops {
namespace {

using ir::OpCall;
using ir::OpSignature;

Expected<OpSignature> accumulate_signature(const OpCall& call) {
  if (call.input_shapes.empty()) return fail("accumulate needs at least one tensor to sum");
  for (std::size_t i = 1; i < call.input_dtypes.size(); ++i)
    if (call.input_dtypes[i] != call.input_dtypes[0])
      return fail(fmt::format("accumulate input {} is {} but input 0 is {}", i, ir::name(call.input_dtypes[i]),
                              ir::name(call.input_dtypes[0])),
                  "cast the partial sums to one dtype first");
  if (!ir::is_floating(call.input_dtypes[0]))
    return fail(fmt::format("accumulate sums floating tensors, got {}", ir::name(call.input_dtypes[0])));
  // Same-shape inputs: the shared identifiers make shape inference reject mismatches.
  return OpSignature{uniform_annotation(call.input_shapes.size(), 1, call.input_shapes[0].rank()), {}, {}};
}

Expected<OpSignature> fill_like_signature(const OpCall& call) {
  if (call.input_shapes.size() != 1) return fail("fill_like takes exactly one tensor (whose shape it copies)");
  return OpSignature{uniform_annotation(1, 1, call.input_shapes[0].rank()), {}, {}};
}

}  // namespace

void register_autograd_ops(OpRegistry& r) {
  r.add_builtin({.type = "accumulate",
                 .family = "autograd",
                 .summary = "sum of same-shape tensors (partial gradients of a tensor read several times)",
                 .op_class = ir::OpClass::elementwise,
                 .signature = accumulate_signature,
                 // n inputs take n - 1 additions per element.
                 .flops =
                     [](const ir::OpInstance& op) {
                       if (op.inputs.empty()) return 0.0;
                       return static_cast<double>(op.inputs.size() - 1) * static_cast<double>(op.inputs[0].numel());
                     },
                 // The gradient of a sum reaches every summand unchanged: nothing to save.
                 .backward = {.saves_inputs = false, .flops_factor = 0.0},
                 .linear = true});
  r.add_builtin({.type = "fill_like",
                 .family = "autograd",
                 .summary = "a tensor shaped like x filled with a constant (seeds the loss gradient)",
                 .op_class = ir::OpClass::elementwise,
                 .attrs = {{"value", ir::AttrKind::real, false, "fill value, default 1"}},
                 .signature = fill_like_signature,
                 .flops = ir::no_flops(),
                 // The output does not depend on x's values.
                 .backward = {.differentiable = false, .saves_inputs = false},
                 .shape_only_inputs = {0}});
}

}  // namespace loom::ops
