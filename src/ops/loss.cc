// Losses: a scalar in f32. cross_entropy and nll_loss sum the counted tokens' losses (label not
// ignore_index) and divide by a whole-batch divisor: the optional third input, the counted tokens of the
// whole batch (a derived input, ir/derived_input.h), which makes the loss torch's mean over counted
// tokens; without it the labels' whole element count (torch's mean whenever no token is ignored). The
// divisor never depends on the shard, so token dims are exact reductions ('+'): shards' partial losses
// add up to the whole, and a micro-batch's loss needs no other micro-batch's labels. The class dim is
// frozen (log-softmax over it). mse_loss divides by the whole element count.
#include "loom/ops/families.h"
#include "loom/ops/signature_helpers.h"

namespace loom::ops {
namespace {

using ir::OpCall;
using ir::OpSignature;

// (scores [.., v], labels [..] integer, counted tokens [] floating?) -> scalar.
ir::SignatureFn classification_signature(std::string op, std::string scores) {
  return [op = std::move(op), scores = std::move(scores)](const OpCall& call) -> Expected<OpSignature> {
    LOOM_RETURN_IF_ERROR(expect_inputs(
        call, 2, 3, op, fmt::format("two or three inputs ({} [.., v], labels [..], counted tokens []?)", scores)));
    LOOM_RETURN_IF_ERROR(expect_integer(call, 1, op, "labels"));
    if (call.input_shapes.size() == 3 && (call.input_shapes[2].rank() != 0 || !ir::is_floating(call.input_dtypes[2])))
      return fail(fmt::format("{}: the counted tokens (input 2) must be a floating scalar, got {} {}", op,
                              ir::name(call.input_dtypes[2]), call.input_shapes[2].to_string()),
                  "give the whole batch's count of labels that are not ignore_index (a derived input)");
    const std::size_t rank = call.input_shapes[0].rank();
    if (rank < 1) return fail(fmt::format("{}: {} must have a class dim, got a scalar", op, scores));
    if (call.input_shapes[1].rank() + 1 != rank)
      return fail(fmt::format("{}: labels {} must have the shape of {} {} without its last dim", op,
                              call.input_shapes[1].to_string(), scores, call.input_shapes[0].to_string()));
    LOOM_RETURN_IF_ERROR(check_label_smoothing(call, op));
    const TensorDims tokens = flagged(token_dims(rank - 1), '+');
    TensorDims logits = tokens;
    logits.push_back("v^");
    std::vector<TensorDims> inputs = {logits, tokens};
    if (call.input_shapes.size() == 3) inputs.push_back({});  // the count: replicated, never split
    return OpSignature{annotation_text(inputs, {{}}), {}, {ir::DType::f32}};
  };
}

Expected<OpSignature> mse_signature(const OpCall& call) {
  LOOM_RETURN_IF_ERROR(expect_inputs(call, 2, 2, "mse_loss", "two inputs (pred, target)"));
  const TensorDims dims = flagged(indexed_dims(call.input_shapes[0].rank()), '+');
  return OpSignature{annotation_text({dims, dims}, {{}}), {}, {ir::DType::f32}};
}

ir::OpDef loss(std::string type, std::string summary, ir::SignatureFn signature, ir::CostFn flops,
               std::vector<ir::AttrSpec> attrs = {}) {
  return loss_op(std::move(type), std::move(summary), std::move(signature), std::move(flops), std::move(attrs), {1, 2});
}

}  // namespace

void register_loss_ops(OpRegistry& r) {
  const std::vector<ir::AttrSpec> attrs = {
      {"ignore_index", ir::AttrKind::integer, false, "label that contributes nothing, e.g. -100"},
      {"label_smoothing", ir::AttrKind::real, false, "in [0, 1), default 0"}};
  // log-softmax (5 per logit) then a pick per token.
  r.add_builtin(loss("cross_entropy", "counted tokens' loss of logits [.., v] at integer labels [..] / count",
                     classification_signature("cross_entropy", "logits"), ir::flops_per_input_element(5), attrs));
  r.add_builtin(loss("nll_loss", "counted tokens' -log_probs [.., v] at integer labels [..] / count",
                     classification_signature("nll_loss", "log_probs"),
                     [](const ir::OpInstance& op) { return static_cast<double>(op.inputs[1].numel()); }, attrs));
  // difference, square, sum: 3 per element.
  r.add_builtin(loss("mse_loss", "mean squared error of pred against target", mse_signature,
                     ir::flops_per_input_element(3)));
  // cross_entropy in vocabulary-splittable parts (cross_entropy_parts.cc).
  register_cross_entropy_parts_ops(r);
}

}  // namespace loom::ops
