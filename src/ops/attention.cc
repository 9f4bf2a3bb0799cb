// Fused attention, the causal mask of eager attention, and rotary position embedding. Attention is
// non-linear across the key length (softmax) and its head sizes are contracted inside the kernel, so t,
// d and e are frozen; batch, heads and query length split freely (sequence parallelism splits s).
#include <cmath>

#include "loom/ops/families.h"
#include "loom/ops/signature_helpers.h"

namespace loom::ops {
namespace {

using ir::OpCall;
using ir::OpSignature;

constexpr std::string_view kSdpa = "scaled_dot_product_attention";

Expected<OpSignature> sdpa_signature(const OpCall& call) {
  LOOM_RETURN_IF_ERROR(expect_inputs(call, 3, 4, kSdpa, "(q, k, v) or (q, k, v, bias)"));
  LOOM_RETURN_IF_ERROR(expect_rank(call, 0, 4, kSdpa, "[b, hq, s, d] (q)"));
  LOOM_RETURN_IF_ERROR(expect_rank(call, 1, 4, kSdpa, "[b, hk, t, d] (k)"));
  LOOM_RETURN_IF_ERROR(expect_rank(call, 2, 4, kSdpa, "[b, hk, t, e] (v)"));
  LOOM_ASSIGN_OR_RETURN(double dropout, ir::get_real_or(call.attrs, "dropout", 0.0));
  if (!(dropout >= 0 && dropout < 1)) return fail(fmt::format("{}: dropout {} is outside [0, 1)", kSdpa, dropout));
  LOOM_ASSIGN_OR_RETURN(double scale, ir::get_real_or(call.attrs, "scale", 1.0));
  if (!(scale > 0 && std::isfinite(scale))) return fail(fmt::format("{}: scale {} must be positive", kSdpa, scale));

  const std::int64_t q_heads = call.input_shapes[0][1], kv_heads = call.input_shapes[1][1];
  if (q_heads % kv_heads != 0)
    return fail(fmt::format("{}: {} query heads are not a multiple of {} key/value heads", kSdpa, q_heads, kv_heads),
                "grouped-query attention needs hq = g * hk");
  OpSignature signature;
  // Grouped-query: each key/value head serves r query heads; only the key/value head may split.
  const std::string heads = q_heads == kv_heads ? "h" : "(h r)";
  if (q_heads != kv_heads) signature.sizes["r"] = q_heads / kv_heads;

  std::vector<TensorDims> inputs = {{"b", heads, "s", "d^"}, {"b", "h", "t^", "d^"}, {"b", "h", "t^", "e^"}};
  if (call.input_shapes.size() == 4) {
    // An additive bias [hq, s, t] or [b, hq, s, t]; size-1 dims broadcast.
    const ir::Shape& bias = call.input_shapes[3];
    if (bias.rank() != 3 && bias.rank() != 4)
      return fail(fmt::format("{}: bias must be [hq, s, t] or [b, hq, s, t], got shape {}", kSdpa, bias.to_string()));
    const TensorDims full = {"b", heads, "s", "t^"};
    const std::vector<std::int64_t> sizes = {call.input_shapes[0][0], q_heads, call.input_shapes[0][2],
                                             call.input_shapes[1][2]};
    TensorDims dims;
    for (std::size_t k = 0; k < bias.rank(); ++k) {
      const std::size_t axis = 4 - bias.rank() + k;
      dims.push_back(bias[k] == 1 && sizes[axis] != 1 ? std::string("1") : full[axis]);
    }
    inputs.push_back(std::move(dims));
  }
  signature.annotation = annotation_text(inputs, {{"b", heads, "s", "e^"}});
  return signature;
}

// QK^T and PV over the full s x t square, even when causal (the Megatron / MFU convention).
double sdpa_flops(const ir::OpInstance& op) {
  const ir::Shape &q = op.inputs[0], &k = op.inputs[1], &v = op.inputs[2];
  const double rows = static_cast<double>(q[0]) * static_cast<double>(q[1]) * static_cast<double>(q[2]) *
                      static_cast<double>(k[2]);
  return 2 * rows * static_cast<double>(q[3]) + 2 * rows * static_cast<double>(v[3]);
}

// Scores [..., s, t] with the keys after each query masked (set to -10000 as Megatron-LM's
// attention_mask_func, so a softmax gives them 0 and no -inf reaches a comparison), in global positions
// as torch's is_causal: key j is visible to query i when j <= i. Every dim splits (a
// slice knows its offsets); the backward passes the gradient of the visible scores and reads nothing saved.
Expected<OpSignature> causal_mask_signature(const OpCall& call) {
  LOOM_RETURN_IF_ERROR(expect_inputs(call, 1, 1, "causal_mask", "one input (scores [..., s, t])"));
  if (call.input_shapes[0].rank() < 2)
    return fail(fmt::format("causal_mask: scores must have rank >= 2 ([..., s, t]), got shape {}",
                            call.input_shapes[0].to_string()));
  return OpSignature{"* s t -> * s t", {}, {}};
}

Expected<OpSignature> rotary_signature(const OpCall& call) {
  LOOM_RETURN_IF_ERROR(expect_inputs(call, 1, 1, "rotary_embedding", "one input (x [b, h, s, d])"));
  LOOM_RETURN_IF_ERROR(expect_rank(call, 0, 4, "rotary_embedding", "[b, h, s, d]"));
  const std::int64_t head_dim = call.input_shapes[0][3];
  if (head_dim % 2 != 0)
    return fail(fmt::format("rotary_embedding: head dim {} is odd", head_dim), "rotary pairs need an even head dim");
  LOOM_ASSIGN_OR_RETURN(double base, ir::get_real_or(call.attrs, "base", 10000.0));
  if (!(base > 0 && std::isfinite(base))) return fail(fmt::format("rotary_embedding: base {} must be positive", base));
  // d pairs elements (i, i + d/2): frozen. s is positional but each position is independent.
  return OpSignature{"b h s d^ -> b h s d^", {}, {}};
}

}  // namespace

void register_attention_ops(OpRegistry& r) {
  r.add_builtin({.type = std::string(kSdpa),
                 .family = "attention",
                 .summary = "softmax(q k^T * scale + bias) v, fused; grouped-query when hq = g * hk",
                 .op_class = ir::OpClass::attention,
                 .attrs = {{"causal", ir::AttrKind::boolean, false, "mask keys after the query, default false"},
                           {"scale", ir::AttrKind::real, false, "logit scale, default 1/sqrt(d)"},
                           {"dropout", ir::AttrKind::real, false, "attention dropout probability, default 0"}},
                 .signature = sdpa_signature,
                 .flops = sdpa_flops,
                 .backward = {.saves_outputs = true, .flops_factor = 2.0}});
  r.add_builtin({.type = "causal_mask",
                 .family = "attention",
                 .summary = "scores [..., s, t] with keys after the query set to -10000 (eager causal attention)",
                 .op_class = ir::OpClass::elementwise,
                 .signature = causal_mask_signature,
                 .flops = ir::flops_per_output_element(1),
                 .backward = {.saves_inputs = false, .flops_factor = 1.0}});
  r.add_builtin({.type = "rotary_embedding",
                 .family = "attention",
                 .summary = "rotate pairs of head-dim elements by position-dependent angles",
                 .op_class = ir::OpClass::elementwise,
                 .attrs = {{"base", ir::AttrKind::real, false, "frequency base, default 10000"}},
                 .signature = rotary_signature,
                 .flops = ir::flops_per_output_element(3),
                 .backward = {.saves_inputs = false, .flops_factor = 1.0}});
}

}  // namespace loom::ops
