// GPT-3 (Brown et al. 2020): a decoder-only transformer with learned position embeddings, pre-LN
// blocks (LayerNorm, causal self-attention with a fused qkv projection, LayerNorm, GELU MLP of 4h),
// biases everywhere, a final LayerNorm and an LM head tied to the token embedding.
//
// Parameters, with attention width w = heads·head_dim: per layer 4·h·w + 3·w + h (attention),
// 8·h² + 5·h (MLP), 4·h (two LayerNorms); plus V·h (wte, reused by the head), n_ctx·h (wpe) and
// 2·h (ln_f). With w = h this is the familiar 12·L·h² + 13·L·h + V·h + n_ctx·h + 2·h.
#include <fmt/format.h>

#include "loom/models/families.h"
#include "loom/models/transformer_blocks.h"

namespace loom::models {
namespace {

struct GptConfig {
  std::string name;
  std::string source;  // where the configuration comes from
  double nominal_params = 0;
  std::int64_t layers = 0;
  std::int64_t hidden = 0;
  std::int64_t heads = 0;
  std::int64_t head_dim = 0;          // 0 = hidden / heads
  std::int64_t ffn = 0;               // the MLP's inner width (4 x hidden in GPT-2/3)
  std::int64_t context = 2048;        // rows of the learned position table (n_ctx)
  std::int64_t seq = 2048;            // default sequence length (<= context)
  std::int64_t vocab = 50257;         // GPT-2/3 BPE vocabulary (REFERENCE.md)
  std::int64_t batch = 1;             // global batch in sequences
};

// GPT-2 / Megatron use dropout 0.1 on embeddings and block outputs; GPT-3's paper does not say
// otherwise.
constexpr double kDropout = 0.1;
constexpr double kLayerNormEps = 1e-5;

// The verification-sized GPT (ModelOptions::shrink): the same blocks at widths a float64 interpreter runs
// in milliseconds.
GptConfig shrink(GptConfig config) {
  using Tiny = TinyTransformer;
  const bool wide_stream = config.head_dim > 0 && config.heads * config.head_dim != config.hidden;
  config.layers = Tiny::layers;
  config.heads = Tiny::heads;
  // GPT-3 13B's residual stream is wider than its attention (5140 vs 5120); its shrunk form keeps that
  // with a stream of 20 (still divisible by 4) around the attention width of 16.
  config.head_dim = wide_stream ? Tiny::head_dim : 0;
  config.hidden = wide_stream ? Tiny::hidden + 4 : Tiny::hidden;
  config.ffn = 4 * config.hidden;
  config.context = config.seq = Tiny::seq;  // learned positions, and the default sequence length
  config.vocab = Tiny::vocab;
  config.batch = Tiny::batch;
  return config;
}

Expected<ir::Graph> build_gpt(const GptConfig& preset, const ModelOptions& options, const ir::OpCatalog& catalog) {
  const GptConfig config = options.shrink ? shrink(preset) : preset;
  const StepShape step = resolve_step_shape(options, config.batch, config.seq, config.layers);
  if (step.seq > config.context)
    return fail(fmt::format("seq {} exceeds the {} learned positions of {}", step.seq, config.context, config.name),
                "use seq <= the context, or a long-context preset such as gpt3-1.3b-16k");
  const std::int64_t h = config.hidden, vocab = padded_vocab(config.vocab, options);
  const ir::DType dtype = step.dtype;
  const bool eager = options.attention != AttentionImpl::fused;
  const NormSpec layer_norm{.kind = NormKind::layer_norm, .eps = kLayerNormEps, .bias = true};
  const AttentionSpec attention{.hidden = h,
                                .heads = config.heads,
                                .head_dim = config.head_dim,
                                .bias = true,
                                .fused_qkv = true,
                                .causal = true,
                                .dropout = kDropout,
                                // Megatron-LM's attention dropout (0.1) where the probabilities are a tensor;
                                // the fused kernel is priced without it, as the presets always were.
                                .attention_dropout = eager ? kDropout : 0.0,
                                .impl = options.attention};
  const MlpSpec ffn{.hidden = h, .ffn = config.ffn, .activation = Activation::gelu, .bias = true, .dropout = kDropout};

  ir::GraphBuilder b(config.name, catalog);
  const ir::TensorId ids = b.input("input_ids", {step.batch, step.seq}, ir::DType::i64);
  const ir::TensorId labels = b.input("labels", {step.batch, step.seq}, ir::DType::i64);
  auto [x, wte] = learned_embeddings(b, ids, vocab, config.context, h, kDropout, dtype);
  for (std::int64_t i = 0; i < step.layers; ++i) {
    auto layer = b.scope(fmt::format("layers.{}", i));
    // Megatron-LM's query-key layer scaling (on by default in v3): layer i + 1 divides q's scale by i + 1
    // and multiplies the fp32 scores by it (read by the eager-fp32 form only).
    AttentionSpec layer_attention = attention;
    layer_attention.query_key_layer_scaling = static_cast<double>(i + 1);
    x = pre_norm_block(b, x, layer_norm, layer_attention, dtype, "mlp", "mlp_residual",
                       [&](ir::TensorId n) { return mlp(b, n, ffn, dtype); });
  }
  x = norm(b, "ln_f", x, h, layer_norm, dtype);
  // Tied head (Press & Wolf 2017, as in GPT-2/3): the token embedding [V h] is the linear weight.
  const ir::TensorId logits = b.op("linear", "lm_head", {x, wte});
  language_model_loss(b, logits, labels);
  return std::move(b).finish();
}

Expected<ModelPreset> make_preset(const ModelSpec& spec, FieldNaming /*naming*/) {
  const GptConfig config{.name = spec.name,
                         .source = spec.source.empty() ? std::string("GPT") : spec.source,
                         .nominal_params = spec.nominal_params,
                         .layers = spec.layers,
                         .hidden = spec.hidden,
                         .heads = spec.heads,
                         .head_dim = spec.head_dim,
                         .ffn = or_default(spec.ffn, 4 * spec.hidden),
                         .context = or_default(spec.positions, or_default(spec.seq, 2048)),
                         .seq = or_default(spec.seq, or_default(spec.positions, 2048)),
                         .vocab = or_default(spec.vocab, 50257),
                         .batch = or_default(spec.batch, 1)};
  const std::int64_t head_dim = config.head_dim > 0 ? config.head_dim : config.hidden / config.heads;
  return preset_from(config,
                     {.name = config.name,
                      .family = "gpt",
                      .description = fmt::format("{}: L{} h{} a{} d_head {} ffn {} vocab {} n_ctx {}", config.source,
                                                 config.layers, config.hidden, config.heads, head_dim, config.ffn,
                                                 config.vocab, config.context),
                      .nominal_params = config.nominal_params,
                      .default_batch = config.batch,
                      .default_seq = config.seq},
                     build_gpt);
}

ModelSpec gpt(std::string name, const char* source, double nominal, std::int64_t layers, std::int64_t hidden,
              std::int64_t heads, std::int64_t seq, std::int64_t batch, std::int64_t head_dim = 0) {
  return {.family = "gpt", .name = std::move(name), .source = source, .nominal_params = nominal, .layers = layers,
          .hidden = hidden, .heads = heads, .head_dim = head_dim, .vocab = 50257, .seq = seq, .batch = batch};
}

}  // namespace

ModelFamily gpt_family() {
  // GPT-3 paper Table 2.1 (REFERENCE.md). Batches are the paper's token batches in 2048-token
  // sequences (0.5M, 0.5M, 0.5M, 1M, 1M, 2M, 2M, 3.2M tokens).
  // Two rows of that table are inconsistent and are read as follows:
  //  - 1.3B lists 24 heads of 128 with d_model 2048 (24·128 != 2048, and 2048/24 is no integer):
  //    we keep d_head 128, i.e. 16 heads, so the attention width equals d_model.
  //  - 13B lists d_model 5140 with 40 heads of 128: we keep both, so the attention width is
  //    40·128 = 5120 while the residual stream is 5140 (qkv [3·5120, 5140], out [5140, 5120]).
  const char* paper = "GPT-3 (Brown et al. 2020)";
  const char* long_doc = "GPT-3 long-sequence (SuperScaler Table 2)";
  return {
      .name = "gpt",
      .summary = "decoder-only transformer (GPT-2/3): learned positions, pre-LN, causal attention, GELU MLP, tied head",
      .fields = {{SpecField::layers, "transformer layers", ""},
                 {SpecField::hidden, "d_model", ""},
                 {SpecField::heads, "attention heads", ""},
                 {SpecField::head_dim, "channels per head", "hidden / heads"},
                 {SpecField::ffn, "MLP inner width", "4 x hidden"},
                 {SpecField::vocab, "BPE vocabulary", "50257"},
                 {SpecField::seq, "sequence length", "positions, else 2048"},
                 {SpecField::positions, "learned position rows (n_ctx)", "seq"},
                 {SpecField::batch, "global batch (sequences)", "1"}},
      .heads_split_hidden = true,
      .make = make_preset,
      .presets =
          {
              gpt("gpt3-125m", paper, 125e6, 12, 768, 12, 2048, 256),
              gpt("gpt3-350m", paper, 350e6, 24, 1024, 16, 2048, 256),
              gpt("gpt3-760m", paper, 760e6, 24, 1536, 16, 2048, 256),
              gpt("gpt3-1.3b", paper, 1.3e9, 24, 2048, 16, 2048, 512),
              gpt("gpt3-2.7b", paper, 2.7e9, 32, 2560, 32, 2048, 512),
              gpt("gpt3-6.7b", paper, 6.7e9, 32, 4096, 32, 2048, 1024),
              gpt("gpt3-13b", paper, 13e9, 40, 5140, 40, 2048, 1024, /*head_dim=*/128),
              gpt("gpt3-175b", paper, 175e9, 96, 12288, 96, 2048, 1536),
              // Rhino Table 1 names (global batch 64 in its full-parallelism runs); GPT-XL has 32 heads of 64.
              gpt("gpt-medium", "GPT-Medium (Rhino Table 1)", 350e6, 24, 1024, 16, 2048, 64),
              gpt("gpt-large", "GPT-Large (Rhino Table 1)", 760e6, 24, 1536, 16, 2048, 64),
              gpt("gpt-xl", "GPT-XL (Rhino Table 1)", 1.3e9, 24, 2048, 32, 2048, 64),
              gpt("gpt-2.7b", "GPT-2.7B (Rhino Table 1)", 2.7e9, 32, 2560, 32, 2048, 64),
              gpt("gpt-6.7b", "GPT-6.7B (Rhino Table 1)", 6.7e9, 32, 4096, 32, 2048, 64),
              // SuperScaler Table 2: long-document GPT-3 at seq 16384 (LongFormer's setting), 32 heads,
              // batch 512; the learned position table grows to 16384 rows.
              gpt("gpt3-1.3b-16k", long_doc, 1.3e9, 24, 2048, 32, 16384, 512),
              gpt("gpt3-2.6b-16k", long_doc, 2.6e9, 32, 2560, 32, 16384, 512),
              gpt("gpt3-6.7b-16k", long_doc, 6.7e9, 32, 4096, 32, 16384, 512),
              gpt("gpt3-15b-16k", long_doc, 15e9, 48, 5120, 32, 16384, 512),
          },
  };
}

}  // namespace loom::models
