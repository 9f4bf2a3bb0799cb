// Transformer building blocks shared by the language-model families (GPT, LLaMA, BERT, T5/mBART,
// GShard MoE) and reusable by any other family: projections, norms, attention, MLPs, embeddings and
// the language-model loss, each built from registry ops on a GraphBuilder.
//
// Conventions. Activations are [batch, seq, hidden]; attention works on [batch, heads, seq, head_dim].
// Every helper names its ops and parameters after PyTorch / Megatron modules under the builder's
// current scope (e.g. "layers.3.attn.qkv" with "layers.3.attn.qkv.weight"). Like GraphBuilder,
// the helpers are error-sticky: once the builder holds an error they append nothing and return an
// invalid id, so model code reads as a straight sequence of blocks and finish() reports the error.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>

#include "loom/ir/graph_builder.h"
#include "loom/models/zoo.h"

namespace loom::models {

// ---- presets and step shape ----------------------------------------------------------------------

// `fields` with build() bound to `build(config, options, catalog)` on a copy of `config`: each
// family's make_preset then lists only its catalogue fields.
template <class Config, class Build>
ModelPreset preset_from(Config config, ModelPreset fields, Build build) {
  fields.build = [config = std::move(config), build](const ModelOptions& options, const ir::OpCatalog& catalog) {
    return build(config, options, catalog);
  };
  return fields;
}

// The batch, sequence length and depth a graph is built with: the options, or the preset's
// defaults where an option is 0.
struct StepShape {
  std::int64_t batch = 0;
  std::int64_t seq = 0;
  std::int64_t layers = 0;
  ir::DType dtype = ir::DType::bf16;
};
StepShape resolve_step_shape(const ModelOptions& options, std::int64_t default_batch, std::int64_t default_seq,
                             std::int64_t default_layers);

// The sizes ModelOptions::shrink gives the language-model families (each family's shrink() maps its
// config onto them): two layers of 4 heads of 4 channels, vocabulary 64, 8 tokens, batch 4. Every size a
// policy splits (batch, heads, hidden, FFN, vocabulary) is divisible by 4, so data or tensor
// parallelism of 2 or 4, or 2 micro-batches per data-parallel part, divides it.
struct TinyTransformer {
  static constexpr std::int64_t layers = 2;
  static constexpr std::int64_t heads = 4;
  static constexpr std::int64_t head_dim = 4;
  static constexpr std::int64_t hidden = heads * head_dim;
  static constexpr std::int64_t vocab = 64;
  static constexpr std::int64_t seq = 8;
  static constexpr std::int64_t batch = 4;
};

// ---- basic layers --------------------------------------------------------------------------------

// torch.nn.Linear: y = x W^T (+ b), parameters "<name>.weight" [out, in] and "<name>.bias" [out].
ir::TensorId linear(ir::GraphBuilder& b, const std::string& name, ir::TensorId x, std::int64_t in_features,
                    std::int64_t out_features, bool bias, ir::DType dtype);

enum class NormKind : std::uint8_t { layer_norm, rms_norm };

struct NormSpec {
  NormKind kind = NormKind::layer_norm;
  double eps = 1e-5;
  bool bias = true;  // layer_norm only; rms_norm has a weight alone
};

// Normalises over the last dimension; parameters "<name>.weight" (and "<name>.bias") of [hidden].
ir::TensorId norm(ir::GraphBuilder& b, const std::string& name, ir::TensorId x, std::int64_t hidden,
                  const NormSpec& spec, ir::DType dtype);

// Dropout with probability p; p == 0 appends nothing and returns x (inference-free models, LLaMA).
ir::TensorId dropout(ir::GraphBuilder& b, const std::string& name, ir::TensorId x, double p);

// torch.nn.Embedding: "<name>.weight" [rows, hidden] gathered by i64 ids of any rank.
ir::TensorId embedding(ir::GraphBuilder& b, const std::string& name, ir::TensorId ids, std::int64_t rows,
                       std::int64_t hidden, ir::DType dtype);

// ---- attention -----------------------------------------------------------------------------------

struct AttentionSpec {
  std::int64_t hidden = 0;    // model width (input and output of the block)
  std::int64_t heads = 0;     // query heads
  std::int64_t kv_heads = 0;  // key/value heads; 0 = heads (multi-head), fewer = grouped-query (GQA)
  std::int64_t head_dim = 0;  // 0 = hidden / heads; GPT-3 13B has heads * head_dim != hidden
  bool bias = true;           // biases on the projections
  // One fused [3·heads·head_dim, hidden] projection laid out per head as [heads, 3, head_dim]
  // (Megatron's layout, so splitting heads keeps q, k, v together); otherwise separate q, k, v.
  bool fused_qkv = true;
  bool causal = false;
  double rope_base = 0;  // > 0: rotary position embedding on q and k (Su et al. 2021), e.g. 10000
  double scale = 0;      // softmax scale; 0 = 1 / sqrt(head_dim). T5 uses 1 (folded into init)
  double dropout = 0;            // on the block's output (after the output projection)
  double attention_dropout = 0;  // on the attention probabilities (inside the fused kernel, or a dropout op)
  AttentionImpl impl = AttentionImpl::fused;  // one fused op, or the eager ops (ModelOptions::attention)
  // eager_fp32_softmax only: Megatron-LM's query-key layer scaling coefficient (the 1-based layer number),
  // dividing q's scale and multiplying the fp32 scores, so the logits are unchanged and the 16-bit scores
  // are c times smaller. 1 for the families Megatron-LM does not build.
  double query_key_layer_scaling = 1;

  std::int64_t q_heads_dim() const { return heads * resolved_head_dim(); }
  std::int64_t kv_heads_dim() const { return resolved_kv_heads() * resolved_head_dim(); }
  std::int64_t resolved_head_dim() const { return head_dim > 0 ? head_dim : (heads > 0 ? hidden / heads : 0); }
  std::int64_t resolved_kv_heads() const { return kv_heads > 0 ? kv_heads : heads; }
};

// Self-attention over x [b s hidden] -> [b s hidden]. Ops "qkv" (or "q", "k", "v"), "rope_q",
// "rope_k", "sdpa", "out", ... in the current scope. `attn_bias` (optional, invalid id = none) is
// an additive score bias [heads s s] or [b heads s s], e.g. T5's relative position bias.
//
// With spec.impl eager, "sdpa" is replaced by the ops PyTorch 1.x runs (Megatron-LM v3's CoreAttention,
// HuggingFace's eager attention): "q_scaled" (q times the scale, Megatron's baddbmm alpha), "scores"
// (einsum q k^T [b h s t]), "scores_bias" (add, with a bias), "causal_mask" (causal only), "probs"
// (softmax over t), "attn_dropout" (with attention dropout) and "context" (einsum with v); grouped-query
// heads are viewed as [b hk r s d] around them ("q_groups", "context_heads"). Saved for backward per
// element of [b h s t]: the probabilities (softmax's output, which dropout reads too) and the dropped
// probabilities (the second einsum's input); without dropout the probabilities alone.
//
// With spec.impl eager_fp32_softmax and a 16-bit dtype, Megatron-LM v3's torch softmax path: "q_scaled" (q
// times scale / c, c = spec.query_key_layer_scaling), "scores" (16-bit), "scores_bias" (with a bias, c = 1
// only), "scores_fp32" (cast), "scores_scaled" (times c, fp32), "causal_mask" (fp32), "probs" (fp32
// softmax, saved), "probs_half" (cast back), "attn_dropout", "context". Saved per element: the fp32
// probabilities (4 bytes), dropout's 16-bit input (2; torch keeps a 1-byte mask) and the dropped
// probabilities (2). In fp32 or f64 nothing is cast, as Megatron's input_in_float16 is false there.
ir::TensorId self_attention(ir::GraphBuilder& b, ir::TensorId x, const AttentionSpec& spec, ir::DType dtype,
                            ir::TensorId attn_bias = {});

// Cross-attention: queries from x [b s hidden], keys and values from memory [b t hidden] (the
// encoder output). Ops "q", "kv", "sdpa" (or the eager ops), "out" in the current scope; never causal,
// no rotary.
ir::TensorId cross_attention(ir::GraphBuilder& b, ir::TensorId x, ir::TensorId memory, const AttentionSpec& spec,
                             ir::DType dtype, ir::TensorId attn_bias = {});

// [b s heads*head_dim] -> [b heads s head_dim] (reshape, then transpose), ops "<name>.view", "<name>".
ir::TensorId split_heads(ir::GraphBuilder& b, const std::string& name, ir::TensorId x, std::int64_t heads,
                         std::int64_t head_dim);
// [b heads s head_dim] -> [b s heads*head_dim], ops "<name>.transpose", "<name>".
ir::TensorId merge_heads(ir::GraphBuilder& b, const std::string& name, ir::TensorId x);

// ---- feed-forward --------------------------------------------------------------------------------

enum class Activation : std::uint8_t {
  gelu,    // GPT, BERT, mBART: fc1, gelu, fc2
  relu,    // T5 v1.0, GShard experts: wi, relu, wo
  swiglu,  // LLaMA: down(silu(gate(x)) * up(x)) (Shazeer 2020)
};

struct MlpSpec {
  std::int64_t hidden = 0;
  std::int64_t ffn = 0;  // inner width
  Activation activation = Activation::gelu;
  bool bias = true;
  double dropout = 0;  // on the block's output
};

// x [b s hidden] -> [b s hidden]. Ops "fc1", "act", "fc2" (gelu/relu) or "gate", "up", "act",
// "down" (swiglu) in the current scope.
ir::TensorId mlp(ir::GraphBuilder& b, ir::TensorId x, const MlpSpec& spec, ir::DType dtype);

// ---- residual blocks -----------------------------------------------------------------------------

// Builds a sublayer (attention, MLP, MoE, ...) on its normalised input.
using Sublayer = std::function<ir::TensorId(ir::TensorId)>;

struct ResidualNames {
  std::string norm;      // the norm op, in the current scope ("ln1")
  std::string scope;     // where the sublayer is built ("attn")
  std::string residual;  // the sum ("attn_residual")
};

// Pre-norm residual branch: x + sublayer(norm(x)), named as `names` says.
ir::TensorId pre_norm_residual(ir::GraphBuilder& b, ir::TensorId x, const ResidualNames& names, std::int64_t hidden,
                               const NormSpec& spec, ir::DType dtype, const Sublayer& sublayer);

// GPT-2 style pre-LN layer, in the current scope ("layers.3"): "ln1", self-attention in "attn",
// "attn_residual"; then "ln2", `ffn` built in scope `ffn_scope`, summed as `ffn_residual` (a
// parameter because GPT says "mlp_residual" and GShard MoE "ffn_residual").
ir::TensorId pre_norm_block(ir::GraphBuilder& b, ir::TensorId x, const NormSpec& norm_spec,
                            const AttentionSpec& attention, ir::DType dtype, const std::string& ffn_scope,
                            const std::string& ffn_residual, const Sublayer& ffn);

// ---- language-model ends -------------------------------------------------------------------------

// Token plus learned position embeddings with GPT-2's names: "wte" (table "wte.weight" [vocab
// hidden]), "wpe" over the "position_ids" buffer, their sum "embed" and "embed_dropout".
struct Embedded {
  ir::TensorId x;            // [b s hidden]
  ir::TensorId token_table;  // "wte.weight", for a tied LM head
};
Embedded learned_embeddings(ir::GraphBuilder& b, ir::TensorId ids, std::int64_t vocab, std::int64_t positions,
                            std::int64_t hidden, double dropout_p, ir::DType dtype);

// An i64 buffer "<name>" [seq] of positions 0..seq-1 (HF's registered position_ids buffer).
ir::TensorId position_ids(ir::GraphBuilder& b, const std::string& name, std::int64_t seq);

// Mean cross entropy of logits [b s v] against labels [b s], set as the graph's loss, built from ops
// whose vocabulary splits are exact (src/ops/cross_entropy_parts.cc): "loss_shift" (target_logit),
// "loss_parts" (cross_entropy_parts) and "loss" (cross_entropy_from_parts), so tensor parallelism keeps
// the LM head's logits split along the vocabulary and exchanges per-token scalars only.
ir::TensorId language_model_loss(ir::GraphBuilder& b, ir::TensorId logits, ir::TensorId labels);

}  // namespace loom::models
