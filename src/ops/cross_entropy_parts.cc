// Cross entropy as three ops whose vocabulary splits are exact, so tensor parallelism can split the
// LM head's logits along the vocabulary (Megatron's vocab-parallel cross entropy, Shoeybi et al. 2019):
//
//   shift      = target_logit(logits, labels)                    v+: each rank's pick, or 0; parts sum
//   sum, tgt   = cross_entropy_parts(logits, labels, shift)      v+: sum_v exp(x_v - shift), the pick
//   loss       = cross_entropy_from_parts(sum, shift, tgt, labels)  sum of log(sum) + shift - tgt / numel
//
// log-sum-exp is not a sum over vocabulary parts unless every part subtracts the same stabiliser, and
// a maximum is not a sum of parts (value parts only add), so the stabiliser is the target logit
// itself, whose parts do add: the sum then holds exp(0) = 1 for the label and never underflows, and
// overflows in f32 only for a token whose loss exceeds ~88 nats. Under a vocabulary split the three
// exchanges are per-token scalars (shift, sum, tgt), as Megatron's (max, sum, target) are.
//
// The shift is a stabiliser: both ops that read it take no gradient through it (its total derivative
// log(sum) + shift is exactly 0), so the backward needs no exchange and the logits' gradient,
// softmax - target, comes from cross_entropy_parts alone.
#include "loom/ops/families.h"
#include "loom/ops/signature_helpers.h"

namespace loom::ops {
namespace {

using ir::OpCall;
using ir::OpSignature;

TensorDims with_vocabulary(TensorDims tokens) {
  tokens.push_back("v+");
  return tokens;
}

// Checks logits [.., v] and labels [..] (inputs 0 and 1); returns the token count of dims.
Expected<std::size_t> check_logits_labels(const OpCall& call, std::string_view op) {
  LOOM_RETURN_IF_ERROR(expect_integer(call, 1, op, "labels"));
  const std::size_t rank = call.input_shapes[0].rank();
  if (rank < 1) return fail(fmt::format("{}: logits must have a vocabulary dim, got a scalar", op));
  if (call.input_shapes[1].rank() + 1 != rank)
    return fail(fmt::format("{}: labels {} must have the shape of logits {} without its last dim", op,
                            call.input_shapes[1].to_string(), call.input_shapes[0].to_string()));
  LOOM_RETURN_IF_ERROR(check_label_smoothing(call, op));
  return rank - 1;
}

// Per-token inputs after the first two must be floating [..].
Expected<void> expect_floating_tokens(const OpCall& call, std::size_t index, std::string_view op, std::string_view role) {
  if (!ir::is_floating(call.input_dtypes[index]))
    return fail(fmt::format("{}: input {} ({}) must be floating, got {}", op, index, role,
                            ir::name(call.input_dtypes[index])));
  return {};
}

// (logits [.., v], labels [..]) -> [..] f32.
Expected<OpSignature> target_logit_signature(const OpCall& call) {
  constexpr std::string_view op = "target_logit";
  LOOM_RETURN_IF_ERROR(expect_inputs(call, 2, 2, op, "two inputs (logits [.., v], labels [..])"));
  LOOM_ASSIGN_OR_RETURN(std::size_t count, check_logits_labels(call, op));
  const TensorDims tokens = token_dims(count);
  return OpSignature{annotation_text({with_vocabulary(tokens), tokens}, {tokens}), {}, {ir::DType::f32}};
}

// (logits [.., v], labels [..], shift [..]) -> (sum [..], target [..]), both f32.
Expected<OpSignature> parts_signature(const OpCall& call) {
  constexpr std::string_view op = "cross_entropy_parts";
  LOOM_RETURN_IF_ERROR(expect_inputs(call, 3, 3, op, "three inputs (logits [.., v], labels [..], shift [..])"));
  LOOM_ASSIGN_OR_RETURN(std::size_t count, check_logits_labels(call, op));
  LOOM_RETURN_IF_ERROR(expect_floating_tokens(call, 2, op, "shift"));
  const TensorDims tokens = token_dims(count);
  return OpSignature{annotation_text({with_vocabulary(tokens), tokens, tokens}, {tokens, tokens}), {},
                     {ir::DType::f32, ir::DType::f32}};
}

// (sum [..], shift [..], target [..], labels [..]) -> scalar f32; tokens are reductions as in
// cross_entropy without a count: the counted tokens' sum over the labels' whole element count, so a
// token shard's partial loss (its tokens' sum over the same count) adds up to the whole.
Expected<OpSignature> from_parts_signature(const OpCall& call) {
  constexpr std::string_view op = "cross_entropy_from_parts";
  LOOM_RETURN_IF_ERROR(
      expect_inputs(call, 4, 4, op, "four inputs (sum [..], shift [..], target [..], labels [..])"));
  LOOM_RETURN_IF_ERROR(expect_floating_tokens(call, 0, op, "sum"));
  LOOM_RETURN_IF_ERROR(expect_floating_tokens(call, 1, op, "shift"));
  LOOM_RETURN_IF_ERROR(expect_floating_tokens(call, 2, op, "target"));
  LOOM_RETURN_IF_ERROR(expect_integer(call, 3, op, "labels"));
  for (std::size_t i = 1; i < 4; ++i)
    if (call.input_shapes[i] != call.input_shapes[0])
      return fail(fmt::format("{}: input {} has shape {}, but the sums are {}; all four are per token", op, i,
                              call.input_shapes[i].to_string(), call.input_shapes[0].to_string()));
  const TensorDims tokens = flagged(token_dims(call.input_shapes[0].rank()), '+');
  return OpSignature{annotation_text({tokens, tokens, tokens, tokens}, {{}}), {}, {ir::DType::f32}};
}

double token_count(const ir::OpInstance& op) { return static_cast<double>(op.inputs[1].numel()); }

bool smoothed(const ir::OpInstance& op) { return ir::get_real_or(op.attrs, "label_smoothing", 0.0).value_or(0) > 0; }

}  // namespace

void register_cross_entropy_parts_ops(OpRegistry& r) {
  const ir::AttrSpec ignore{"ignore_index", ir::AttrKind::integer, false, "label that contributes nothing, e.g. -100"};
  const ir::AttrSpec smoothing{"label_smoothing", ir::AttrKind::real, false, "in [0, 1), default 0"};

  // A pick per token; label smoothing adds a sum over the vocabulary.
  ir::OpDef target = loss_op(
      "target_logit", "per token, the label's logit of logits [.., v] ((1-eps) x[label] + eps mean x when smoothed)",
      target_logit_signature,
      [](const ir::OpInstance& op) { return smoothed(op) ? static_cast<double>(op.inputs[0].numel()) : token_count(op); },
      {ignore, smoothing}, {1});
  // Without smoothing it reads one logit per token, not the whole row.
  target.bytes = [](const ir::OpInstance& op) {
    const double tokens = token_count(op);
    const double logits = smoothed(op) ? static_cast<double>(op.inputs[0].numel()) : tokens;
    return logits * static_cast<double>(ir::size_bytes(op.input_dtypes[0])) +
           tokens * static_cast<double>(ir::size_bytes(op.input_dtypes[1]) + ir::size_bytes(op.output_dtypes[0]));
  };
  r.add_builtin(std::move(target));
  // Subtract, exponentiate, sum, and the target's pick (or smoothed sum): 4 per logit.
  r.add_builtin(loss_op(
      "cross_entropy_parts",
      "per token, sum_v exp(logits - shift) and the target logit: cross entropy's vocabulary-splittable part",
      parts_signature, ir::flops_per_input_element(4), {ignore, smoothing}, {1, 2}));
  // A log, two adds per token.
  r.add_builtin(loss_op("cross_entropy_from_parts", "counted tokens' sum of log(sum) + shift - target / labels' numel",
                        from_parts_signature, ir::flops_per_input_element(3), {ignore}, {1, 3}));
}

}  // namespace loom::ops
