// AlphaFold2 Evoformer operators (Jumper et al. 2021, supplementary Alg. 7-14), fused: each op
// takes its (already layer-normed) activations plus its weights, so one op is one sub-module and its
// annotation states which axes a plan may split. That is how DAP (FastFold) parallelises the
// Evoformer: MSA row attention splits the sequence axis s, column attention the residue axis r,
// triangle ops one residue axis of the pair tensor. An op that needs a whole tensor along the axis it
// splits (the key side of a triangle product, the pair bias) takes that tensor a second time as its
// own input, annotated frozen: splitting the op then replicates that copy, i.e. DAP's all-gather.
//
// Shapes: MSA m [b s r cm], pair z [b r r cz]. Gated attention weights (Alg. 7, 8, 13, 14):
// w_qkvg [4 h d c] (q, k, v, gate projections, no bias except the gate's), b_g [h d], optional pair-bias
// projection w_bias [h cz], w_o [e h d], b_o [e]. Heads are a reduction: the output projection sums
// over them, so a head split leaves partial sums (Megatron's attention split).
//
// FLOPs count every matmul exactly (2 per multiply-add) and pointwise work with the per-element
// constants below, stated next to each formula.
#include "loom/ops/families.h"

namespace loom::ops {
namespace {

using ir::OpCall;
using ir::OpSignature;

constexpr double kSoftmaxPerElement = 5.0;  // bias add, max, exp, sum, divide
constexpr double kGatePerElement = 5.0;     // sigmoid (~4) and the multiply
constexpr double kLayerNormPerElement = 8.0;

double d(std::int64_t v) { return static_cast<double>(v); }

Expected<void> expect_inputs(std::string_view op, const OpCall& call, std::size_t count, std::string_view layout) {
  if (call.input_shapes.size() != count)
    return fail(fmt::format("{} takes {} inputs ({}), got {}", op, count, layout, call.input_shapes.size()));
  return {};
}

Expected<void> expect_square_pair(std::string_view op, const ir::Shape& z, std::string_view which) {
  if (z.rank() != 4 || z[1] != z[2])
    return fail(fmt::format("{}: {} must be a pair tensor [b r r c], got {}", op, which, z.to_string()));
  return {};
}

// Gated multi-head attention with an optional pair bias; `attended` says which axis of x the softmax
// runs over (for the annotation text) and the annotation of x itself.
struct GatedAttentionForm {
  std::string x;     // annotation of the activations, e.g. "b s r^ c^"
  std::string bias;  // annotation of the bias source, empty when there is none
  std::string out;   // annotation of the output
};

std::string gated_attention_annotation(const GatedAttentionForm& form) {
  std::string text = form.x;
  if (!form.bias.empty()) text += ", " + form.bias;
  text += ", 4 h+ d^ c^, h+ d^";
  if (!form.bias.empty()) text += ", h+ y^";
  return text + ", e h+ d^, e -> " + form.out;
}

// Checks the weights of a gated attention: w_qkvg [4 h d c], b_g [h d], (w_bias [h cz]), w_o [e h d], b_o [e].
Expected<void> check_gated_weights(std::string_view op, const OpCall& call, std::size_t first_weight, std::int64_t c) {
  const ir::Shape& w = call.input_shapes[first_weight];
  if (w.rank() != 4 || w[0] != 4 || w[3] != c)
    return fail(fmt::format("{}: w_qkvg must be [4 heads head_dim {}], got {}", op, c, w.to_string()));
  return {};
}

// 4 projections, scores and weighted sum, softmax, gate, output projection, plus the pair bias.
double gated_attention_flops(std::int64_t batch_rows, std::int64_t length, std::int64_t c, std::int64_t h,
                             std::int64_t head_dim, std::int64_t e, double bias_flops) {
  const double tokens = d(batch_rows) * d(length);
  const double projections = 4 * 2 * tokens * d(c) * d(h * head_dim);
  const double attention = 2 * 2 * d(batch_rows) * d(h) * d(length) * d(length) * d(head_dim);
  const double softmax = kSoftmaxPerElement * d(batch_rows) * d(h) * d(length) * d(length);
  const double gate = kGatePerElement * tokens * d(h * head_dim);
  const double out = 2 * tokens * d(h * head_dim) * d(e) + tokens * d(e);
  return projections + attention + softmax + gate + out + bias_flops;
}

// Alg. 7: inputs m [b s r cm], z [b r r cz], w_qkvg, b_g, w_bias, w_o, b_o. Attention over residues
// within each MSA row; rows (s) are independent, so s splits freely.
Expected<OpSignature> msa_row_attention_signature(const OpCall& call) {
  constexpr std::string_view op = "msa_row_attention_with_pair_bias";
  LOOM_RETURN_IF_ERROR(expect_inputs(op, call, 7, "m, z, w_qkvg, b_g, w_bias, w_o, b_o"));
  const ir::Shape& m = call.input_shapes[0];
  if (m.rank() != 4) return fail(fmt::format("{}: m must be [b s r cm], got {}", op, m.to_string()));
  LOOM_RETURN_IF_ERROR(expect_square_pair(op, call.input_shapes[1], "z"));
  if (call.input_shapes[1][1] != m[2] || call.input_shapes[1][0] != m[0])
    return fail(fmt::format("{}: pair {} does not match the MSA's residues in {}", op, call.input_shapes[1].to_string(),
                            m.to_string()));
  LOOM_RETURN_IF_ERROR(check_gated_weights(op, call, 2, m[3]));
  return OpSignature{gated_attention_annotation({"b s r^ c^", "b r^ t^ y^", "b s r^ e"}), {}, {}};
}

double msa_row_attention_flops(const ir::OpInstance& op) {
  const ir::Shape &m = op.inputs[0], &z = op.inputs[1], &w = op.inputs[2], &wo = op.inputs[5];
  const double bias = 2 * d(z[0]) * d(z[1]) * d(z[2]) * d(z[3]) * d(w[1]);
  return gated_attention_flops(m[0] * m[1], m[2], m[3], w[1], w[2], wo[0], bias);
}

// Alg. 8: inputs m [b s r cm], w_qkvg, b_g, w_o, b_o. Attention over sequences within each column.
Expected<OpSignature> msa_column_attention_signature(const OpCall& call) {
  constexpr std::string_view op = "msa_column_attention";
  LOOM_RETURN_IF_ERROR(expect_inputs(op, call, 5, "m, w_qkvg, b_g, w_o, b_o"));
  const ir::Shape& m = call.input_shapes[0];
  if (m.rank() != 4) return fail(fmt::format("{}: m must be [b s r cm], got {}", op, m.to_string()));
  LOOM_RETURN_IF_ERROR(check_gated_weights(op, call, 1, m[3]));
  return OpSignature{gated_attention_annotation({"b s^ r c^", "", "b s^ r e"}), {}, {}};
}

double msa_column_attention_flops(const ir::OpInstance& op) {
  const ir::Shape &m = op.inputs[0], &w = op.inputs[1], &wo = op.inputs[3];
  return gated_attention_flops(m[0] * m[2], m[1], m[3], w[1], w[2], wo[0], 0.0);
}

// Alg. 13 / 14: inputs z, z (again, for the bias), w_qkvg, b_g, w_bias, w_o, b_o. Starting node: each
// row i attends along j, biased by z[j, k]; ending node: each column j attends along i, biased by z[k, i].
Expected<OpSignature> triangle_attention_signature(const OpCall& call) {
  constexpr std::string_view op = "triangle_attention";
  LOOM_RETURN_IF_ERROR(expect_inputs(op, call, 7, "z, z (bias source), w_qkvg, b_g, w_bias, w_o, b_o"));
  LOOM_ASSIGN_OR_RETURN(std::string mode, ir::get_string(call.attrs, "mode"));
  LOOM_RETURN_IF_ERROR(expect_square_pair(op, call.input_shapes[0], "z"));
  if (call.input_shapes[1] != call.input_shapes[0])
    return fail(fmt::format("{}: the bias source {} must be the pair tensor {} itself", op,
                            call.input_shapes[1].to_string(), call.input_shapes[0].to_string()));
  LOOM_RETURN_IF_ERROR(check_gated_weights(op, call, 2, call.input_shapes[0][3]));
  if (mode == "starting")
    return OpSignature{gated_attention_annotation({"b i j^ c^", "b j^ k^ y^", "b i j^ e"}), {}, {}};
  if (mode == "ending")
    return OpSignature{gated_attention_annotation({"b i^ j c^", "b k^ i^ y^", "b i^ j e"}), {}, {}};
  return fail(fmt::format("{}: mode must be \"starting\" or \"ending\", got \"{}\"", op, mode));
}

double triangle_attention_flops(const ir::OpInstance& op) {
  const ir::Shape &z = op.inputs[0], &w = op.inputs[2], &wo = op.inputs[5];
  const double bias = 2 * d(z[0]) * d(z[1]) * d(z[2]) * d(z[3]) * d(w[1]);
  return gated_attention_flops(z[0] * z[1], z[2], z[3], w[1], w[2], wo[0], bias);
}

// Alg. 11 / 12: inputs z (left edges), z (right edges), z (gate), w_ab [4 ch cz], b_ab [4 ch],
// ln_w [ch], ln_b [ch], w_o [e ch], b_o [e], w_g [e cz], b_g [e]. Outgoing: sum_k a[i,k] b[j,k];
// incoming: sum_k a[k,i] b[k,j]. The sum feeds a layer norm, so k is frozen, not a reduction.
Expected<OpSignature> triangle_multiplication_signature(const OpCall& call) {
  constexpr std::string_view op = "triangle_multiplication";
  LOOM_RETURN_IF_ERROR(expect_inputs(op, call, 11, "z, z, z, w_ab, b_ab, ln_w, ln_b, w_o, b_o, w_g, b_g"));
  LOOM_ASSIGN_OR_RETURN(std::string mode, ir::get_string(call.attrs, "mode"));
  const ir::Shape& z = call.input_shapes[0];
  LOOM_RETURN_IF_ERROR(expect_square_pair(op, z, "z"));
  if (call.input_shapes[1] != z || call.input_shapes[2] != z)
    return fail(fmt::format("{}: inputs 0-2 must all be the pair tensor {}", op, z.to_string()));
  const ir::Shape& w = call.input_shapes[3];
  if (w.rank() != 3 || w[0] != 4 || w[2] != z[3])
    return fail(fmt::format("{}: w_ab must be [4 hidden {}], got {}", op, z[3], w.to_string()));
  const std::string weights = "4 ch^ c^, 4 ch^, ch^, ch^, e ch^, e, e c^, e -> b i j e";
  if (mode == "outgoing") return OpSignature{"b i k^ c^, b j k^ c^, b i j c^, " + weights, {}, {}};
  if (mode == "incoming") return OpSignature{"b k^ i c^, b k^ j c^, b i j c^, " + weights, {}, {}};
  return fail(fmt::format("{}: mode must be \"outgoing\" or \"incoming\", got \"{}\"", op, mode));
}

double triangle_multiplication_flops(const ir::OpInstance& op) {
  const ir::Shape &z = op.inputs[0], &w = op.inputs[3], &wo = op.inputs[7];
  const double pairs = d(z[0]) * d(z[1]) * d(z[2]);
  const double c = d(z[3]), hidden = d(w[1]), e = d(wo[0]);
  const double projections = 4 * (2 * pairs * c * hidden + pairs * hidden);  // a, b and their gates, with bias
  const double gating = 2 * kGatePerElement * pairs * hidden;
  const double product = 2 * pairs * d(z[1]) * hidden;  // sum over k for every (i, j, channel)
  const double norm = kLayerNormPerElement * pairs * hidden;
  const double out = 2 * pairs * hidden * e + 2 * pairs * c * e + kGatePerElement * pairs * e;
  return projections + gating + product + norm + out;
}

// Alg. 10: inputs m (left), m (right), w_ab [2 p cm], b_ab [2 p], w_o [e p*p], b_o [e]. The mean over
// sequences is linear, so s is a reduction: splitting it (DAP's MSA split) leaves partial sums.
Expected<OpSignature> outer_product_mean_signature(const OpCall& call) {
  constexpr std::string_view op = "outer_product_mean";
  LOOM_RETURN_IF_ERROR(expect_inputs(op, call, 6, "m, m, w_ab, b_ab, w_o, b_o"));
  const ir::Shape& m = call.input_shapes[0];
  if (m.rank() != 4) return fail(fmt::format("{}: m must be [b s r cm], got {}", op, m.to_string()));
  if (call.input_shapes[1] != m) return fail(fmt::format("{}: inputs 0 and 1 must both be the MSA {}", op, m.to_string()));
  const ir::Shape& w = call.input_shapes[2];
  if (w.rank() != 3 || w[0] != 2 || w[2] != m[3])
    return fail(fmt::format("{}: w_ab must be [2 hidden {}], got {}", op, m[3], w.to_string()));
  return OpSignature{"b s+ i c^, b s+ j c^, 2 p^ c^, 2 p^, e (p^ q^), e -> b i j e", {{"q", w[1]}}, {}};
}

double outer_product_mean_flops(const ir::OpInstance& op) {
  const ir::Shape &m = op.inputs[0], &w = op.inputs[2], &wo = op.inputs[4];
  const double b = d(m[0]), s = d(m[1]), r = d(m[2]), c = d(m[3]), p = d(w[1]), e = d(wo[0]);
  const double projections = 2 * (2 * b * s * r * c * p + b * s * r * p);
  const double outer = 2 * b * r * r * s * p * p;  // sum over s of a[s,i] (x) b[s,j]
  const double out = 2 * b * r * r * p * p * e + b * r * r * e;
  return projections + outer + out;
}

}  // namespace

void register_alphafold_ops(OpRegistry& r) {
  r.add_builtin({.type = "msa_row_attention_with_pair_bias",
                 .family = "alphafold",
                 .summary = "gated MSA row attention biased by the pair tensor (AF2 Alg. 7)",
                 .op_class = ir::OpClass::attention,
                 .signature = msa_row_attention_signature,
                 .flops = msa_row_attention_flops});
  r.add_builtin({.type = "msa_column_attention",
                 .family = "alphafold",
                 .summary = "gated MSA column attention (AF2 Alg. 8)",
                 .op_class = ir::OpClass::attention,
                 .signature = msa_column_attention_signature,
                 .flops = msa_column_attention_flops});
  r.add_builtin({.type = "triangle_attention",
                 .family = "alphafold",
                 .summary = "gated triangle self-attention around the starting or ending node (AF2 Alg. 13, 14)",
                 .op_class = ir::OpClass::attention,
                 .attrs = {{"mode", ir::AttrKind::string, true, "\"starting\" or \"ending\""}},
                 .signature = triangle_attention_signature,
                 .flops = triangle_attention_flops});
  r.add_builtin({.type = "triangle_multiplication",
                 .family = "alphafold",
                 .summary = "triangle multiplicative update, outgoing or incoming edges (AF2 Alg. 11, 12)",
                 .op_class = ir::OpClass::contraction,
                 .attrs = {{"mode", ir::AttrKind::string, true, "\"outgoing\" or \"incoming\""}},
                 .signature = triangle_multiplication_signature,
                 .flops = triangle_multiplication_flops});
  r.add_builtin({.type = "outer_product_mean",
                 .family = "alphafold",
                 .summary = "outer product mean over sequences, MSA -> pair update (AF2 Alg. 10)",
                 .op_class = ir::OpClass::contraction,
                 .signature = outer_product_mean_signature,
                 .flops = outer_product_mean_flops});
  // Recycling (AF2 Sec. 1.10): the previous iteration's outputs enter the next one without gradient.
  // Non-differentiable, so autograd gives no backward op to anything that reaches the loss only
  // through it: the earlier forward passes stay forward-only (the "3 forward + 1 backward" step).
  r.add_builtin({.type = "recycle_detach",
                 .family = "alphafold",
                 .summary = "identity that stops the gradient; feeds one recycling iteration into the next",
                 .op_class = ir::OpClass::data_movement,
                 .signature = ir::fixed_signature("* -> *"),
                 .flops = ir::no_flops(),
                 .backward = {.differentiable = false}});
}

}  // namespace loom::ops
