// Mixture of experts as GShard writes it, tokens grouped as x [g, t, h]: a gate picks top-k experts
// per token within a capacity c per expert and group; dispatch and combine are einsums with the
// resulting one-hot tensors, so they split like contractions. Expert FFNs are plain `einsum`s.
#include "loom/ops/families.h"
#include "loom/ops/signature_helpers.h"

namespace loom::ops {
namespace {

using ir::OpCall;
using ir::OpSignature;

// Routing is non-linear across tokens of a group (capacity is a running count over t), across
// experts (softmax, top-k) and across h (the logits feed a softmax): only groups split.
Expected<OpSignature> gate_signature(const OpCall& call) {
  LOOM_RETURN_IF_ERROR(expect_inputs(call, 2, 2, "moe_gate", "two inputs (x [g, t, h], gate weight [e, h])"));
  LOOM_RETURN_IF_ERROR(expect_rank(call, 0, 3, "moe_gate", "[g, t, h]"));
  LOOM_RETURN_IF_ERROR(expect_rank(call, 1, 2, "moe_gate", "[e, h]"));
  const std::int64_t experts = call.input_shapes[1][0];
  LOOM_ASSIGN_OR_RETURN(std::int64_t top_k, ir::get_int_or(call.attrs, "top_k", 2));
  LOOM_ASSIGN_OR_RETURN(std::int64_t capacity, ir::get_int(call.attrs, "capacity"));
  if (top_k < 1 || top_k > experts)
    return fail(fmt::format("moe_gate: top_k {} is outside [1, {}] for {} experts", top_k, experts, experts));
  if (capacity <= 0) return fail(fmt::format("moe_gate: capacity {} must be positive", capacity));
  const ir::DType weights = call.input_dtypes.empty() ? ir::DType::f32 : call.input_dtypes[0];
  // The dispatch mask is bool and so carries no gradient; the combine weights do (to x and the gate).
  return OpSignature{"g t^ h^, e^ h^ -> g t^ e^ c^, g t^ e^ c^", {{"c", capacity}}, {weights, ir::DType::boolean}};
}

// Logits (2 g t h e), then softmax over experts (5 per logit).
double gate_flops(const ir::OpInstance& op) {
  const double tokens = static_cast<double>(op.inputs[0][0]) * static_cast<double>(op.inputs[0][1]);
  const double experts = static_cast<double>(op.inputs[1][0]);
  return 2 * tokens * static_cast<double>(op.inputs[0][2]) * experts + 5 * tokens * experts;
}

Expected<OpSignature> dispatch_signature(const OpCall& call) {
  LOOM_RETURN_IF_ERROR(expect_inputs(call, 2, 2, "moe_dispatch", "two inputs (x [g, t, h], dispatch [g, t, e, c])"));
  LOOM_RETURN_IF_ERROR(expect_rank(call, 0, 3, "moe_dispatch", "[g, t, h]"));
  LOOM_RETURN_IF_ERROR(expect_rank(call, 1, 4, "moe_dispatch", "[g, t, e, c]"));
  // einsum "gtec,gth->egch"
  return OpSignature{"g t+ h, g t+ e c -> e g c h", {}, {}};
}

Expected<OpSignature> combine_signature(const OpCall& call) {
  LOOM_RETURN_IF_ERROR(
      expect_inputs(call, 2, 2, "moe_combine", "two inputs (expert_out [e, g, c, h], combine [g, t, e, c])"));
  LOOM_RETURN_IF_ERROR(expect_rank(call, 0, 4, "moe_combine", "[e, g, c, h]"));
  LOOM_RETURN_IF_ERROR(expect_rank(call, 1, 4, "moe_combine", "[g, t, e, c]"));
  // einsum "gtec,egch->gth"
  return OpSignature{"e+ g c+ h, g t e+ c+ -> g t h", {}, {}};
}

}  // namespace

void register_moe_ops(OpRegistry& r) {
  r.add_builtin({.type = "moe_gate",
                 .family = "moe",
                 .summary = "top-k gate with capacity: (combine weights [g t e c], dispatch mask [g t e c])",
                 .op_class = ir::OpClass::contraction,
                 .attrs = {{"top_k", ir::AttrKind::integer, false, "experts per token, default 2"},
                           {"capacity", ir::AttrKind::integer, true, "tokens per expert and group"}},
                 .signature = gate_signature,
                 .flops = gate_flops});
  r.add_builtin({.type = "moe_dispatch",
                 .family = "moe",
                 .summary = "route tokens to expert slots: einsum gtec,gth->egch",
                 .op_class = ir::OpClass::contraction,
                 .signature = dispatch_signature,
                 .flops = ir::contraction_flops(),
                 .backward = {.no_grad_inputs = {1}}});
  r.add_builtin({.type = "moe_combine",
                 .family = "moe",
                 .summary = "weighted sum of expert outputs back to tokens: einsum gtec,egch->gth",
                 .op_class = ir::OpClass::contraction,
                 .signature = combine_signature,
                 .flops = ir::contraction_flops()});
}

}  // namespace loom::ops
