#include "loom/models/transformer_blocks.h"

#include <cmath>
#include <vector>

#include <fmt/format.h>

namespace loom::models {
namespace {

using ir::Attrs;
using ir::GraphBuilder;
using ir::TensorId;

// A tensor whose shape may be read: the builder holds no error and the id is real.
bool usable(const GraphBuilder& b, TensorId x) { return b.ok() && x.valid(); }

std::vector<std::int64_t> dims(const GraphBuilder& b, TensorId x) { return b.shape(x).dims; }

// Checks the sizes of an attention block once, so that a bad preset or option reads as one message
// about the block instead of a shape mismatch deep inside a reshape.
bool check_attention(GraphBuilder& b, const AttentionSpec& spec) {
  if (!b.ok()) return false;
  std::string where = b.qualified("");  // "layers.3.attn."
  if (!where.empty() && where.back() == '.') where.pop_back();
  if (spec.hidden <= 0 || spec.heads <= 0) {
    b.set_error(Error{fmt::format("attention '{}': hidden {} and heads {} must be positive", where, spec.hidden,
                                  spec.heads),
                      {}});
    return false;
  }
  if (spec.head_dim == 0 && spec.hidden % spec.heads != 0) {
    b.set_error(Error{fmt::format("attention '{}': hidden {} is not divisible by {} heads", where, spec.hidden,
                                  spec.heads),
                      "give head_dim explicitly or choose a head count dividing the hidden size"});
    return false;
  }
  const std::int64_t kv = spec.resolved_kv_heads();
  if (kv <= 0 || spec.heads % kv != 0) {
    b.set_error(Error{fmt::format("attention '{}': {} query heads are not a multiple of {} key/value heads", where,
                                  spec.heads, kv),
                      "grouped-query attention needs heads = groups x kv_heads"});
    return false;
  }
  if (spec.fused_qkv && kv != spec.heads) {
    b.set_error(Error{fmt::format("attention '{}': a fused qkv projection needs kv_heads == heads", where),
                      "use separate q, k, v projections for grouped-query attention"});
    return false;
  }
  if (spec.rope_base > 0 && spec.resolved_head_dim() % 2 != 0) {
    b.set_error(Error{fmt::format("attention '{}': rotary embedding needs an even head_dim, got {}", where,
                                  spec.resolved_head_dim()),
                      {}});
    return false;
  }
  return true;
}

double softmax_scale(const AttentionSpec& spec) {
  return spec.scale > 0 ? spec.scale : 1.0 / std::sqrt(static_cast<double>(spec.resolved_head_dim()));
}

TensorId fused_attention(GraphBuilder& b, TensorId q, TensorId k, TensorId v, TensorId attn_bias, bool causal,
                         const AttentionSpec& spec) {
  std::vector<TensorId> inputs{q, k, v};
  if (attn_bias.valid()) inputs.push_back(attn_bias);
  Attrs attrs{{"causal", causal}, {"scale", softmax_scale(spec)}};
  if (spec.attention_dropout > 0) attrs.emplace("dropout", spec.attention_dropout);
  return b.op("scaled_dot_product_attention", "sdpa", inputs, std::move(attrs));
}

// The fused op's function spelled as separate ops (AttentionSpec::impl, self_attention's comment). The scale
// multiplies q ([b h s d], not the scores: Megatron's baddbmm alpha), so the logits are scale·q·k + bias as
// the fused op's. Grouped-query heads (hq = hk·r, query head i reads key head i / r) are viewed as
// [b hk r s d] so both einsums keep the key/value heads whole. eager_fp32_softmax in a 16-bit dtype runs
// the score passes in fp32 (Megatron-LM v3's FusedScaleMaskSoftmax.forward_torch_softmax): q carries
// scale / c, the fp32 copy of the scores is multiplied by c (query-key layer scaling), masked and
// softmaxed, and the probabilities are cast back before dropout.
TensorId eager_attention(GraphBuilder& b, TensorId q, TensorId k, TensorId v, TensorId attn_bias, bool causal,
                         const AttentionSpec& spec, ir::DType dtype) {
  if (!usable(b, q)) return {};
  const std::vector<std::int64_t> q_dims = dims(b, q);  // [b hq s d]
  const std::int64_t kv_heads = spec.resolved_kv_heads(), groups = spec.heads / kv_heads;
  if (attn_bias.valid() && groups > 1) {  // no family has both
    b.set_error(Error{"eager attention: an additive bias with grouped-query heads is not built",
                      "use --attention fused for this model"});
    return {};
  }
  const bool fp32_softmax = spec.impl == AttentionImpl::eager_fp32_softmax;
  const double coefficient = fp32_softmax ? spec.query_key_layer_scaling : 1.0;
  if (!(coefficient >= 1) || (attn_bias.valid() && coefficient != 1)) {  // no family has a bias with it
    b.set_error(Error{fmt::format("eager-fp32 attention: query-key layer scaling {} with{} a score bias is not built",
                                  coefficient, attn_bias.valid() ? "" : "out"),
                      "use a coefficient >= 1, and 1 with a bias"});
    return {};
  }
  TensorId scaled = b.op("scale", "q_scaled", {q}, Attrs{{"factor", softmax_scale(spec) / coefficient}});
  std::string head = "h";
  if (groups > 1) {
    scaled = b.op("reshape", "q_groups", {scaled},
                  Attrs{{"shape", std::vector<std::int64_t>{q_dims[0], kv_heads, groups, q_dims[2], q_dims[3]}}});
    head = "hr";
  }
  TensorId scores = b.op("einsum", "scores", {scaled, k},
                         Attrs{{"equation", fmt::format("b{0}sd,bhtd->b{0}st", head)}});
  if (attn_bias.valid()) scores = b.op("add", "scores_bias", {scores, attn_bias});
  const bool cast = fp32_softmax && ir::size_bytes(dtype) < ir::size_bytes(ir::DType::f32);
  if (cast) scores = b.op("cast", "scores_fp32", {scores}, Attrs{{"dtype", std::string(ir::name(ir::DType::f32))}});
  if (fp32_softmax) scores = b.op("scale", "scores_scaled", {scores}, Attrs{{"factor", coefficient}});
  if (causal) scores = b.op("causal_mask", "causal_mask", {scores});
  TensorId probs = b.op("softmax", "probs", {scores}, Attrs{{"dim", std::int64_t{-1}}});
  if (cast) probs = b.op("cast", "probs_half", {probs}, Attrs{{"dtype", std::string(ir::name(dtype))}});
  probs = dropout(b, "attn_dropout", probs, spec.attention_dropout);
  TensorId context = b.op("einsum", "context", {probs, v}, Attrs{{"equation", fmt::format("b{0}st,bhte->b{0}se", head)}});
  if (groups > 1 && usable(b, context)) {
    const std::vector<std::int64_t> c = dims(b, context);  // [b hk r s e]
    context = b.op("reshape", "context_heads", {context},
                   Attrs{{"shape", std::vector<std::int64_t>{c[0], c[1] * c[2], c[3], c[4]}}});
  }
  return context;
}

// Attention, merge heads, output projection, dropout: the common tail of self- and cross-attention.
TensorId attend_and_project(GraphBuilder& b, TensorId q, TensorId k, TensorId v, TensorId attn_bias, bool causal,
                            const AttentionSpec& spec, ir::DType dtype) {
  if (!b.ok()) return {};
  const TensorId context = spec.impl == AttentionImpl::fused ? fused_attention(b, q, k, v, attn_bias, causal, spec)
                                                             : eager_attention(b, q, k, v, attn_bias, causal, spec, dtype);
  const TensorId merged = merge_heads(b, "merge_heads", context);
  const TensorId out = linear(b, "out", merged, spec.q_heads_dim(), spec.hidden, spec.bias, dtype);
  return dropout(b, "dropout", out, spec.dropout);
}

}  // namespace

StepShape resolve_step_shape(const ModelOptions& options, std::int64_t default_batch, std::int64_t default_seq,
                             std::int64_t default_layers) {
  return StepShape{.batch = options.batch > 0 ? options.batch : default_batch,
                   .seq = options.seq > 0 ? options.seq : default_seq,
                   .layers = options.layers > 0 ? options.layers : default_layers,
                   .dtype = options.dtype};
}

TensorId linear(GraphBuilder& b, const std::string& name, TensorId x, std::int64_t in_features,
                std::int64_t out_features, bool bias, ir::DType dtype) {
  if (!b.ok()) return {};
  std::vector<TensorId> inputs{x, b.parameter(name + ".weight", {out_features, in_features}, dtype)};
  if (bias) inputs.push_back(b.parameter(name + ".bias", {out_features}, dtype));
  return b.op("linear", name, inputs);
}

TensorId norm(GraphBuilder& b, const std::string& name, TensorId x, std::int64_t hidden, const NormSpec& spec,
              ir::DType dtype) {
  if (!b.ok()) return {};
  std::vector<TensorId> inputs{x, b.parameter(name + ".weight", {hidden}, dtype)};
  if (spec.kind == NormKind::rms_norm) return b.op("rms_norm", name, inputs, Attrs{{"eps", spec.eps}});
  if (spec.bias) inputs.push_back(b.parameter(name + ".bias", {hidden}, dtype));
  return b.op("layer_norm", name, inputs, Attrs{{"eps", spec.eps}});
}

TensorId dropout(GraphBuilder& b, const std::string& name, TensorId x, double p) {
  if (!b.ok() || p <= 0) return x;
  return b.op("dropout", name, {x}, Attrs{{"p", p}});
}

TensorId embedding(GraphBuilder& b, const std::string& name, TensorId ids, std::int64_t rows, std::int64_t hidden,
                   ir::DType dtype) {
  if (!b.ok()) return {};
  const TensorId table = b.parameter(name + ".weight", {rows, hidden}, dtype);
  return b.op("embedding", name, {ids, table});
}

TensorId split_heads(GraphBuilder& b, const std::string& name, TensorId x, std::int64_t heads, std::int64_t head_dim) {
  if (!usable(b, x)) return {};
  const std::vector<std::int64_t> d = dims(b, x);  // [b s heads*head_dim]
  const TensorId viewed = b.op("reshape", name + ".view", {x},
                               Attrs{{"shape", std::vector<std::int64_t>{d[0], d[1], heads, head_dim}}});
  return b.op("transpose", name, {viewed}, Attrs{{"dim0", std::int64_t{1}}, {"dim1", std::int64_t{2}}});
}

TensorId merge_heads(GraphBuilder& b, const std::string& name, TensorId x) {
  if (!usable(b, x)) return {};
  const TensorId transposed =
      b.op("transpose", name + ".transpose", {x}, Attrs{{"dim0", std::int64_t{1}}, {"dim1", std::int64_t{2}}});
  if (!usable(b, transposed)) return {};
  const std::vector<std::int64_t> d = dims(b, transposed);  // [b s heads head_dim]
  return b.op("reshape", name, {transposed}, Attrs{{"shape", std::vector<std::int64_t>{d[0], d[1], d[2] * d[3]}}});
}

TensorId self_attention(GraphBuilder& b, TensorId x, const AttentionSpec& spec, ir::DType dtype, TensorId attn_bias) {
  if (!usable(b, x) || !check_attention(b, spec)) return {};
  const std::int64_t heads = spec.heads, kv_heads = spec.resolved_kv_heads(), head_dim = spec.resolved_head_dim();
  TensorId q, k, v;
  if (spec.fused_qkv) {
    // Megatron layout: rows of the fused weight are [heads, (q k v), head_dim], so one reshape to
    // [b s heads 3·head_dim] and a chunk on the last dimension give per-head q, k, v.
    const TensorId qkv = linear(b, "qkv", x, spec.hidden, 3 * spec.q_heads_dim(), spec.bias, dtype);
    if (!usable(b, qkv)) return {};
    const std::vector<std::int64_t> d = dims(b, qkv);
    const TensorId per_head = b.op("reshape", "qkv.view", {qkv},
                                   Attrs{{"shape", std::vector<std::int64_t>{d[0], d[1], heads, 3 * head_dim}}});
    const std::vector<TensorId> parts =
        b.ops("chunk", "qkv.split", {per_head}, Attrs{{"chunks", std::int64_t{3}}, {"dim", std::int64_t{3}}});
    if (!b.ok() || parts.size() != 3) return {};
    const Attrs swap{{"dim0", std::int64_t{1}}, {"dim1", std::int64_t{2}}};
    q = b.op("transpose", "q_heads", {parts[0]}, swap);
    k = b.op("transpose", "k_heads", {parts[1]}, swap);
    v = b.op("transpose", "v_heads", {parts[2]}, swap);
  } else {
    q = split_heads(b, "q_heads", linear(b, "q", x, spec.hidden, spec.q_heads_dim(), spec.bias, dtype), heads,
                    head_dim);
    k = split_heads(b, "k_heads", linear(b, "k", x, spec.hidden, spec.kv_heads_dim(), spec.bias, dtype), kv_heads,
                    head_dim);
    v = split_heads(b, "v_heads", linear(b, "v", x, spec.hidden, spec.kv_heads_dim(), spec.bias, dtype), kv_heads,
                    head_dim);
  }
  if (spec.rope_base > 0) {
    q = b.op("rotary_embedding", "rope_q", {q}, Attrs{{"base", spec.rope_base}});
    k = b.op("rotary_embedding", "rope_k", {k}, Attrs{{"base", spec.rope_base}});
  }
  return attend_and_project(b, q, k, v, attn_bias, spec.causal, spec, dtype);
}

TensorId cross_attention(GraphBuilder& b, TensorId x, TensorId memory, const AttentionSpec& spec, ir::DType dtype,
                         TensorId attn_bias) {
  if (!usable(b, x) || !usable(b, memory) || !check_attention(b, spec)) return {};
  const std::int64_t kv_heads = spec.resolved_kv_heads(), head_dim = spec.resolved_head_dim();
  const TensorId q = split_heads(b, "q_heads", linear(b, "q", x, spec.hidden, spec.q_heads_dim(), spec.bias, dtype),
                                 spec.heads, head_dim);
  // Keys and values read the encoder output; one fused [2·kv·d, h] projection as in Megatron's
  // ParallelAttention (cross-attention key_value), laid out [kv_heads, (k v), head_dim].
  const TensorId kv = linear(b, "kv", memory, spec.hidden, 2 * spec.kv_heads_dim(), spec.bias, dtype);
  if (!usable(b, kv)) return {};
  const std::vector<std::int64_t> d = dims(b, kv);
  const TensorId per_head =
      b.op("reshape", "kv.view", {kv}, Attrs{{"shape", std::vector<std::int64_t>{d[0], d[1], kv_heads, 2 * head_dim}}});
  const std::vector<TensorId> parts =
      b.ops("chunk", "kv.split", {per_head}, Attrs{{"chunks", std::int64_t{2}}, {"dim", std::int64_t{3}}});
  if (!b.ok() || parts.size() != 2) return {};
  const Attrs swap{{"dim0", std::int64_t{1}}, {"dim1", std::int64_t{2}}};
  const TensorId k = b.op("transpose", "k_heads", {parts[0]}, swap);
  const TensorId v = b.op("transpose", "v_heads", {parts[1]}, swap);
  return attend_and_project(b, q, k, v, attn_bias, /*causal=*/false, spec, dtype);
}

TensorId mlp(GraphBuilder& b, TensorId x, const MlpSpec& spec, ir::DType dtype) {
  if (!usable(b, x)) return {};
  TensorId out;
  switch (spec.activation) {
    case Activation::gelu:
    case Activation::relu: {
      const TensorId up = linear(b, "fc1", x, spec.hidden, spec.ffn, spec.bias, dtype);
      const TensorId act = b.op(spec.activation == Activation::gelu ? "gelu" : "relu", "act", {up});
      out = linear(b, "fc2", act, spec.ffn, spec.hidden, spec.bias, dtype);
      break;
    }
    case Activation::swiglu: {
      const TensorId gate = linear(b, "gate", x, spec.hidden, spec.ffn, spec.bias, dtype);
      const TensorId up = linear(b, "up", x, spec.hidden, spec.ffn, spec.bias, dtype);
      const TensorId act = b.op("swiglu", "act", {gate, up});
      out = linear(b, "down", act, spec.ffn, spec.hidden, spec.bias, dtype);
      break;
    }
  }
  return dropout(b, "dropout", out, spec.dropout);
}

TensorId pre_norm_residual(GraphBuilder& b, TensorId x, const ResidualNames& names, std::int64_t hidden,
                           const NormSpec& spec, ir::DType dtype, const Sublayer& sublayer) {
  const TensorId normed = norm(b, names.norm, x, hidden, spec, dtype);
  TensorId out;
  {
    auto s = b.scope(names.scope);
    out = sublayer(normed);
  }
  return b.op("add", names.residual, {x, out});
}

TensorId pre_norm_block(GraphBuilder& b, TensorId x, const NormSpec& norm_spec, const AttentionSpec& attention,
                        ir::DType dtype, const std::string& ffn_scope, const std::string& ffn_residual,
                        const Sublayer& ffn) {
  const std::int64_t h = attention.hidden;
  x = pre_norm_residual(b, x, {.norm = "ln1", .scope = "attn", .residual = "attn_residual"}, h, norm_spec, dtype,
                        [&](TensorId n) { return self_attention(b, n, attention, dtype); });
  return pre_norm_residual(b, x, {.norm = "ln2", .scope = ffn_scope, .residual = ffn_residual}, h, norm_spec, dtype,
                           ffn);
}

Embedded learned_embeddings(GraphBuilder& b, TensorId ids, std::int64_t vocab, std::int64_t positions,
                            std::int64_t hidden, double dropout_p, ir::DType dtype) {
  if (!usable(b, ids)) return {};
  const std::int64_t seq = dims(b, ids).back();  // ids [b s]
  const TensorId table = b.parameter("wte.weight", {vocab, hidden}, dtype);
  const TensorId tokens = b.op("embedding", "wte", {ids, table});
  const TensorId pos = embedding(b, "wpe", position_ids(b, "position_ids", seq), positions, hidden, dtype);
  return {.x = dropout(b, "embed_dropout", b.op("add", "embed", {tokens, pos}), dropout_p), .token_table = table};
}

TensorId position_ids(GraphBuilder& b, const std::string& name, std::int64_t seq) {
  if (!b.ok()) return {};
  return b.buffer(name, {seq}, ir::DType::i64);
}

TensorId language_model_loss(GraphBuilder& b, TensorId logits, TensorId labels) {
  if (!b.ok()) return {};
  // The target logit is the log-sum-exp's stabiliser: every vocabulary part must subtract the same one.
  const TensorId shift = b.op("target_logit", "loss_shift", {logits, labels});
  const std::vector<TensorId> parts = b.ops("cross_entropy_parts", "loss_parts", {logits, labels, shift});
  if (parts.size() != 2) return {};
  const TensorId loss = b.op("cross_entropy_from_parts", "loss", {parts[0], shift, parts[1], labels});
  b.set_loss(loss);
  return loss;
}

}  // namespace loom::models
