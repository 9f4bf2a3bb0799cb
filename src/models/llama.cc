// LLaMA 1/2/3 (Touvron et al. 2023a/b; Meta 2024): a decoder-only transformer without biases,
// pre-RMSNorm blocks, rotary position embedding on q and k (no position table), SwiGLU MLP
// (down(silu(gate(x)) * up(x))), grouped-query attention in LLaMA-2-70B and LLaMA-3, a final
// RMSNorm and an untied LM head.
//
// Parameters, with w_q = heads·d and w_kv = kv_heads·d: per layer 2·h·w_q + 2·h·w_kv (q, k, v, o)
// + 3·h·ffn (gate, up, down) + 2·h (two RMSNorms); plus 2·V·h (embedding, head) and h (final norm).
#include <fmt/format.h>

#include "loom/models/families.h"
#include "loom/models/transformer_blocks.h"

namespace loom::models {
namespace {

struct LlamaConfig {
  std::string name;
  std::string source;
  double nominal_params = 0;
  std::int64_t layers = 0;
  std::int64_t hidden = 0;
  std::int64_t heads = 0;
  std::int64_t kv_heads = 0;  // 0 = heads
  std::int64_t head_dim = 0;  // 0 = hidden / heads
  std::int64_t ffn = 0;
  std::int64_t vocab = 32000;
  std::int64_t seq = 2048;    // training context
  double rope_base = 10000;   // RoPE theta
  double norm_eps = 1e-6;
  std::int64_t batch = 1;     // global batch in sequences
};

// The verification-sized LLaMA (ModelOptions::shrink).
LlamaConfig shrink(LlamaConfig config) {
  using Tiny = TinyTransformer;
  const bool grouped = config.kv_heads > 0 && config.kv_heads < config.heads;
  config.layers = Tiny::layers;
  // Grouped-query presets keep GQA with 8 query heads sharing 4 key/value heads, so both head counts
  // stay divisible by tensor-parallel degrees 2 and 4; the others keep 4 heads.
  config.heads = grouped ? 2 * Tiny::heads : Tiny::heads;
  config.kv_heads = grouped ? Tiny::heads : 0;
  config.head_dim = 0;
  config.hidden = Tiny::head_dim * config.heads;
  config.ffn = 3 * config.hidden;  // SwiGLU's ~8/3 x hidden, rounded to a multiple of 4
  config.vocab = Tiny::vocab;
  config.seq = Tiny::seq;
  config.batch = Tiny::batch;
  return config;  // RoPE base and RMSNorm eps are kept
}

Expected<ir::Graph> build_llama(const LlamaConfig& preset, const ModelOptions& options,
                                const ir::OpCatalog& catalog) {
  const LlamaConfig config = options.shrink ? shrink(preset) : preset;
  const StepShape step = resolve_step_shape(options, config.batch, config.seq, config.layers);
  const std::int64_t h = config.hidden;
  const ir::DType dtype = step.dtype;
  const NormSpec rms_norm{.kind = NormKind::rms_norm, .eps = config.norm_eps, .bias = false};
  const AttentionSpec attention{.hidden = h,
                                .heads = config.heads,
                                .kv_heads = config.kv_heads,
                                .head_dim = config.head_dim,
                                .bias = false,
                                .fused_qkv = false,
                                .causal = true,
                                .rope_base = config.rope_base,
                                .impl = options.attention};
  const MlpSpec ffn{.hidden = h, .ffn = config.ffn, .activation = Activation::swiglu, .bias = false};

  ir::GraphBuilder b(config.name, catalog);
  const ir::TensorId ids = b.input("input_ids", {step.batch, step.seq}, ir::DType::i64);
  const ir::TensorId labels = b.input("labels", {step.batch, step.seq}, ir::DType::i64);
  ir::TensorId x = embedding(b, "embed_tokens", ids, padded_vocab(config.vocab, options), h, dtype);
  for (std::int64_t i = 0; i < step.layers; ++i) {
    auto layer = b.scope(fmt::format("layers.{}", i));
    x = pre_norm_residual(b, x, {.norm = "attn_norm", .scope = "attn", .residual = "attn_residual"}, h, rms_norm,
                          dtype, [&](ir::TensorId n) { return self_attention(b, n, attention, dtype); });
    x = pre_norm_residual(b, x, {.norm = "mlp_norm", .scope = "mlp", .residual = "mlp_residual"}, h, rms_norm, dtype,
                          [&](ir::TensorId n) { return mlp(b, n, ffn, dtype); });
  }
  x = norm(b, "norm", x, h, rms_norm, dtype);
  const ir::TensorId logits = linear(b, "lm_head", x, h, padded_vocab(config.vocab, options), /*bias=*/false, dtype);
  language_model_loss(b, logits, labels);
  return std::move(b).finish();
}

Expected<ModelPreset> make_preset(const ModelSpec& spec, FieldNaming /*naming*/) {
  const LlamaConfig config{.name = spec.name,
                           .source = spec.source.empty() ? std::string("LLaMA") : spec.source,
                           .nominal_params = spec.nominal_params,
                           .layers = spec.layers,
                           .hidden = spec.hidden,
                           .heads = spec.heads,
                           .kv_heads = spec.kv_heads,
                           .head_dim = spec.head_dim,
                           .ffn = spec.ffn,
                           .vocab = or_default(spec.vocab, 32000),
                           .seq = or_default(spec.seq, 2048),
                           .rope_base = or_default(spec.rope_base, 1e4),
                           .norm_eps = or_default(spec.norm_eps, 1e-6),
                           .batch = or_default(spec.batch, 1)};
  const std::int64_t kv = config.kv_heads > 0 ? config.kv_heads : config.heads;
  return preset_from(config,
                     {.name = config.name,
                      .family = "llama",
                      .description = fmt::format("{}: L{} h{} a{} kv{} ffn {} vocab {} seq {}", config.source,
                                                 config.layers, config.hidden, config.heads, kv, config.ffn,
                                                 config.vocab, config.seq),
                      .nominal_params = config.nominal_params,
                      .default_batch = config.batch,
                      .default_seq = config.seq},
                     build_llama);
}

struct LlamaRow {
  const char* name;
  const char* source;
  double nominal;
  std::int64_t layers, hidden, heads, kv_heads, ffn, vocab, seq;
  double rope_base, norm_eps;
  std::int64_t batch;
};

ModelSpec llama(const LlamaRow& row) {
  return {.family = "llama", .name = row.name, .source = row.source, .nominal_params = row.nominal,
          .layers = row.layers, .hidden = row.hidden, .heads = row.heads, .kv_heads = row.kv_heads, .ffn = row.ffn,
          .vocab = row.vocab, .seq = row.seq, .batch = row.batch, .rope_base = row.rope_base,
          .norm_eps = row.norm_eps};
}

}  // namespace

ModelFamily llama_family() {
  // Sizes from REFERENCE.md. Contexts: 2048 (LLaMA), 4096 (LLaMA-2), 8192 (LLaMA-3). Default
  // batches are 4M-token batches (the LLaMA and LLaMA-2 papers' setting; kept for LLaMA-3-8B).
  // LLaMA-2 and 3 use RMSNorm eps 1e-5; LLaMA-3 raises the RoPE base to 500000.
  const LlamaRow rows[] = {
      {"llama-7b", "LLaMA-7B (Touvron et al. 2023)", 6.7e9, 32, 4096, 32, 0, 11008, 32000, 2048, 1e4, 1e-6, 2048},
      {"llama-13b", "LLaMA-13B (Touvron et al. 2023)", 13e9, 40, 5120, 40, 0, 13824, 32000, 2048, 1e4, 1e-6, 2048},
      {"llama-65b", "LLaMA-65B (Touvron et al. 2023)", 65e9, 80, 8192, 64, 0, 22016, 32000, 2048, 1e4, 1e-6, 2048},
      {"llama2-70b", "LLaMA-2-70B (Touvron et al. 2023b)", 70e9, 80, 8192, 64, 8, 28672, 32000, 4096, 1e4, 1e-5,
       1024},
      {"llama3-8b", "LLaMA-3-8B (Meta 2024)", 8e9, 32, 4096, 32, 8, 14336, 128256, 8192, 5e5, 1e-5, 512},
  };
  ModelFamily family{
      .name = "llama",
      .summary = "decoder-only transformer (LLaMA 1/2/3): RoPE, pre-RMSNorm, SwiGLU MLP, grouped-query attention, "
                 "untied head",
      .fields = {{SpecField::layers, "transformer layers", ""},
                 {SpecField::hidden, "d_model", ""},
                 {SpecField::heads, "query heads", ""},
                 {SpecField::kv_heads, "key/value heads (GQA)", "heads"},
                 {SpecField::head_dim, "channels per head", "hidden / heads"},
                 {SpecField::ffn, "SwiGLU inner width", ""},
                 {SpecField::vocab, "vocabulary", "32000"},
                 {SpecField::seq, "sequence length", "2048"},
                 {SpecField::rope_base, "RoPE theta", "10000"},
                 {SpecField::norm_eps, "RMSNorm epsilon", "1e-6"},
                 {SpecField::batch, "global batch (sequences)", "1"}},
      .heads_split_hidden = true,
      .make = make_preset,
  };
  for (const LlamaRow& row : rows) family.presets.push_back(llama(row));
  return family;
}

}  // namespace loom::models
