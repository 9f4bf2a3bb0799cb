// Optimizer ops: one per parameter, pass optimizer. Inputs: param, grad, then states (fp32 master copy
// when "master_weights", then sgd's momentum or adam's exp_avg, exp_avg_sq); outputs: param', then
// states'. Elementwise over the parameter with one identifier per dimension, so ZeRO can split them.
#include "loom/ir/autograd.h"
#include "loom/ops/families.h"
#include "uniform_annotation.h"

namespace loom::ops {
namespace {

using ir::AttrKind;
using ir::OpCall;
using ir::OpSignature;

using ir::OptimizerKind;

Expected<std::size_t> state_count(OptimizerKind kind, const ir::Attrs& attrs) {
  LOOM_ASSIGN_OR_RETURN(bool master, ir::get_bool_or(attrs, "master_weights", false));
  std::size_t states = master ? 1 : 0;
  if (kind == OptimizerKind::sgd) {
    LOOM_ASSIGN_OR_RETURN(double momentum, ir::get_real_or(attrs, "momentum", 0.0));
    if (momentum < 0) return fail(fmt::format("sgd momentum must be >= 0, got {}", momentum));
    if (momentum > 0) ++states;
  } else {
    states += 2;  // exp_avg, exp_avg_sq
  }
  return states;
}

ir::SignatureFn optimizer_signature(OptimizerKind kind, std::string type) {
  return [kind, type = std::move(type)](const OpCall& call) -> Expected<OpSignature> {
    LOOM_ASSIGN_OR_RETURN(std::size_t states, state_count(kind, call.attrs));
    if (call.input_shapes.size() != 2 + states)
      return fail(fmt::format("{} with these attributes takes param, grad and {} states ({} inputs), got {}", type,
                              states, 2 + states, call.input_shapes.size()),
                  "states come in order: master (when master_weights), then momentum or exp_avg, exp_avg_sq");
    if (!ir::is_floating(call.input_dtypes[0]) || !ir::is_floating(call.input_dtypes[1]))
      return fail(fmt::format("{} updates floating parameters, got param {} and grad {}", type,
                              ir::name(call.input_dtypes[0]), ir::name(call.input_dtypes[1])));
    for (std::size_t i = 2; i < call.input_dtypes.size(); ++i)
      if (call.input_dtypes[i] != ir::DType::f32)
        return fail(fmt::format("{} state (input {}) must be f32, got {}", type, i, ir::name(call.input_dtypes[i])));
    OpSignature signature{uniform_annotation(2 + states, 1 + states, call.input_shapes[0].rank()), {}, {}};
    signature.output_dtypes.push_back(call.input_dtypes[0]);
    signature.output_dtypes.resize(1 + states, ir::DType::f32);
    return signature;
  };
}

// FLOPs per parameter element, counted as in the usual fused kernels.
ir::CostFn optimizer_flops(OptimizerKind kind) {
  return [kind](const ir::OpInstance& op) {
    if (op.inputs.empty()) return 0.0;
    double per_element = 12.0;  // adam: two moment updates, bias corrections, sqrt, divide, step
    if (kind == OptimizerKind::adamw) per_element = 14.0;  // plus the decoupled decay (multiply, subtract)
    if (kind == OptimizerKind::sgd) {
      const bool momentum = ir::get_real_or(op.attrs, "momentum", 0.0).value_or(0.0) > 0;
      per_element = momentum ? 4.0 : 2.0;  // p -= lr g; momentum first does v = mu v + g
    }
    return per_element * static_cast<double>(op.inputs[0].numel());
  };
}

ir::AttrSpec real_attr(std::string name, std::string doc) {
  return {std::move(name), AttrKind::real, false, std::move(doc)};
}

const ir::AttrSpec kMasterWeights{"master_weights", AttrKind::boolean, false,
                                  "an fp32 master copy follows the gradient among the inputs (default false)"};

ir::OpDef optimizer_def(OptimizerKind kind, std::string summary, std::vector<ir::AttrSpec> attrs) {
  attrs.push_back(kMasterWeights);
  std::string type(ir::name(kind));
  return {.type = type,
          .family = "optimizer",
          .summary = std::move(summary),
          .op_class = ir::OpClass::optimizer,
          .attrs = std::move(attrs),
          .signature = optimizer_signature(kind, type),
          .flops = optimizer_flops(kind),
          .backward = {.differentiable = false, .saves_inputs = false}};
}

}  // namespace

void register_optimizer_ops(OpRegistry& r) {
  r.add_builtin(optimizer_def(OptimizerKind::sgd, "stochastic gradient descent, optional momentum",
                              {real_attr("lr", "learning rate"),
                               real_attr("momentum", "> 0 adds a momentum state (default 0)"),
                               real_attr("weight_decay", "L2 penalty (default 0)")}));
  r.add_builtin(optimizer_def(OptimizerKind::adam, "Adam: states exp_avg, exp_avg_sq",
                              {real_attr("lr", "learning rate"), real_attr("beta1", "first-moment decay"),
                               real_attr("beta2", "second-moment decay"), real_attr("eps", "denominator term"),
                               real_attr("weight_decay", "L2 penalty added to the gradient (default 0)")}));
  r.add_builtin(optimizer_def(OptimizerKind::adamw, "AdamW: Adam with decoupled weight decay",
                              {real_attr("lr", "learning rate"), real_attr("beta1", "first-moment decay"),
                               real_attr("beta2", "second-moment decay"), real_attr("eps", "denominator term"),
                               real_attr("weight_decay", "decoupled weight decay")}));
}

}  // namespace loom::ops
