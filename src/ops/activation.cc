// Activations. Pointwise ones split along every dim; softmax-like ones freeze the dim they
// normalize over, since every output there depends on all its inputs.
#include "loom/ops/families.h"
#include "loom/ops/signature_helpers.h"

namespace loom::ops {
namespace {

using ir::OpCall;
using ir::OpSignature;

Expected<OpSignature> gelu_signature(const OpCall& call) {
  LOOM_RETURN_IF_ERROR(expect_inputs(call, 1, 1, "gelu", "one input (x)"));
  // Checked in place: binding a std::string through LOOM_ASSIGN_OR_RETURN trips g++ 12's
  // -Wmaybe-uninitialized false positive.
  const Expected<std::string> approximate = ir::get_string_or(call.attrs, "approximate", "none");
  if (!approximate) return std::unexpected(approximate.error());
  if (*approximate != "none" && *approximate != "tanh")
    return fail(fmt::format("gelu: attribute 'approximate' is '{}'", *approximate), "use 'none' or 'tanh'");
  return OpSignature{"* -> *", {}, {}};
}

// Gated units: output = act(gate) * up, all three the same shape.
ir::SignatureFn gated_signature(std::string op) {
  return [op = std::move(op)](const OpCall& call) -> Expected<OpSignature> {
    LOOM_RETURN_IF_ERROR(expect_inputs(call, 2, 2, op, "two inputs (gate, up)"));
    return OpSignature{"* f, * f -> * f", {}, {}};
  };
}

// "d0 d1 d2^ -> d0 d1 d2^" for dim 2 of a rank-3 input.
ir::SignatureFn softmax_signature(std::string op) {
  return [op = std::move(op)](const OpCall& call) -> Expected<OpSignature> {
    LOOM_RETURN_IF_ERROR(expect_inputs(call, 1, 1, op, "one input (x)"));
    LOOM_ASSIGN_OR_RETURN(std::int64_t dim_attr, ir::get_int_or(call.attrs, "dim", -1));
    const std::size_t rank = call.input_shapes[0].rank();
    LOOM_ASSIGN_OR_RETURN(std::size_t dim, normalize_dim(dim_attr, rank, op));
    TensorDims dims = indexed_dims(rank);
    dims[dim] += '^';
    return OpSignature{annotation_text({dims}, {dims}), {}, {}};
  };
}

Expected<OpSignature> dropout_signature(const OpCall& call) {
  LOOM_RETURN_IF_ERROR(expect_inputs(call, 1, 1, "dropout", "one input (x)"));
  LOOM_ASSIGN_OR_RETURN(double p, ir::get_real_or(call.attrs, "p", 0.1));
  if (!(p >= 0 && p < 1)) return fail(fmt::format("dropout: probability p = {} is outside [0, 1)", p));
  return OpSignature{"* -> *", {}, {}};
}

ir::OpDef activation(std::string type, std::string summary, ir::SignatureFn signature, double flops,
                     ir::BackwardRule backward = {.flops_factor = 1.0}, std::vector<ir::AttrSpec> attrs = {}) {
  return {.type = std::move(type),
          .family = "activation",
          .summary = std::move(summary),
          .op_class = ir::OpClass::elementwise,
          .attrs = std::move(attrs),
          .signature = std::move(signature),
          .flops = ir::flops_per_output_element(flops),
          .backward = std::move(backward)};
}

}  // namespace

void register_activation_ops(OpRegistry& r) {
  r.add_builtin(activation("gelu", "Gaussian error linear unit", gelu_signature, 8, {.flops_factor = 1.0},
                           {{"approximate", ir::AttrKind::string, false, "'none' (erf, default) or 'tanh'"}}));
  r.add_builtin(activation("relu", "max(x, 0)", ir::fixed_signature("* -> *"), 1,
                           {.saves_inputs = false, .saves_outputs = true, .flops_factor = 1.0}));
  r.add_builtin(activation("silu", "x * sigmoid(x)", ir::fixed_signature("* -> *"), 4));
  r.add_builtin(activation("swiglu", "silu(gate) * up", gated_signature("swiglu"), 5));
  r.add_builtin(activation("geglu", "gelu(gate) * up", gated_signature("geglu"), 9));
  r.add_builtin(activation("dropout", "zero elements with probability p, scale the rest by 1/(1-p)",
                           dropout_signature, 1, {.flops_factor = 1.0},
                           {{"p", ir::AttrKind::real, false, "drop probability, default 0.1"}}));

  const std::vector<ir::AttrSpec> dim_attr = {{"dim", ir::AttrKind::integer, false, "normalized dim, default -1"}};
  ir::OpDef softmax = activation("softmax", "exp(x) / sum(exp(x)) along dim", softmax_signature("softmax"), 5,
                                 {.saves_inputs = false, .saves_outputs = true, .flops_factor = 1.0}, dim_attr);
  softmax.op_class = ir::OpClass::reduction;
  r.add_builtin(std::move(softmax));
  ir::OpDef log_softmax = activation("log_softmax", "x - log(sum(exp(x))) along dim",
                                     softmax_signature("log_softmax"), 5,
                                     {.saves_inputs = false, .saves_outputs = true, .flops_factor = 1.0}, dim_attr);
  log_softmax.op_class = ir::OpClass::reduction;
  r.add_builtin(std::move(log_softmax));
}

}  // namespace loom::ops
