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
  std::int64_t context = 2048;        // rows of the learned position table (n_ctx)
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
  config.context = Tiny::seq;  // learned positions, and the default sequence length
  config.vocab = Tiny::vocab;
  config.batch = Tiny::batch;
  return config;
}

Expected<ir::Graph> build_gpt(const GptConfig& preset, const ModelOptions& options, const ir::OpCatalog& catalog) {
  const GptConfig config = options.shrink ? shrink(preset) : preset;
  const StepShape step = resolve_step_shape(options, config.batch, config.context, config.layers);
  if (step.seq > config.context)
    return fail(fmt::format("seq {} exceeds the {} learned positions of {}", step.seq, config.context, config.name),
                "use seq <= the context, or a long-context preset such as gpt3-1.3b-16k");
  const std::int64_t h = config.hidden, vocab = padded_vocab(config.vocab, options);
  const ir::DType dtype = step.dtype;
  const bool eager = options.attention == AttentionImpl::eager;
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
  const MlpSpec ffn{.hidden = h, .ffn = 4 * h, .activation = Activation::gelu, .bias = true, .dropout = kDropout};

  ir::GraphBuilder b(config.name, catalog);
  const ir::TensorId ids = b.input("input_ids", {step.batch, step.seq}, ir::DType::i64);
  const ir::TensorId labels = b.input("labels", {step.batch, step.seq}, ir::DType::i64);
  auto [x, wte] = learned_embeddings(b, ids, vocab, config.context, h, kDropout, dtype);
  for (std::int64_t i = 0; i < step.layers; ++i) {
    auto layer = b.scope(fmt::format("layers.{}", i));
    x = pre_norm_block(b, x, layer_norm, attention, dtype, "mlp", "mlp_residual",
                       [&](ir::TensorId n) { return mlp(b, n, ffn, dtype); });
  }
  x = norm(b, "ln_f", x, h, layer_norm, dtype);
  // Tied head (Press & Wolf 2017, as in GPT-2/3): the token embedding [V h] is the linear weight.
  const ir::TensorId logits = b.op("linear", "lm_head", {x, wte});
  language_model_loss(b, logits, labels);
  return std::move(b).finish();
}

ModelPreset make_preset(const GptConfig& config) {
  const std::int64_t head_dim = config.head_dim > 0 ? config.head_dim : config.hidden / config.heads;
  return preset_from(config,
                     {.name = config.name,
                      .family = "gpt",
                      .description = fmt::format("{}: L{} h{} a{} d_head {} ffn {} vocab {} n_ctx {}", config.source,
                                                 config.layers, config.hidden, config.heads, head_dim,
                                                 4 * config.hidden, config.vocab, config.context),
                      .nominal_params = config.nominal_params,
                      .default_batch = config.batch,
                      .default_seq = config.context},
                     build_gpt);
}

}  // namespace

std::vector<ModelPreset> gpt_presets() {
  // GPT-3 paper Table 2.1 (REFERENCE.md). Batches are the paper's token batches in 2048-token
  // sequences (0.5M, 0.5M, 0.5M, 1M, 1M, 2M, 2M, 3.2M tokens).
  // Two rows of that table are inconsistent and are read as follows:
  //  - 1.3B lists 24 heads of 128 with d_model 2048 (24·128 != 2048, and 2048/24 is no integer):
  //    we keep d_head 128, i.e. 16 heads, so the attention width equals d_model.
  //  - 13B lists d_model 5140 with 40 heads of 128: we keep both, so the attention width is
  //    40·128 = 5120 while the residual stream is 5140 (qkv [3·5120, 5140], out [5140, 5120]).
  const char* paper = "GPT-3 (Brown et al. 2020)";
  std::vector<GptConfig> configs = {
      {"gpt3-125m", paper, 125e6, 12, 768, 12, 0, 2048, 50257, 256},
      {"gpt3-350m", paper, 350e6, 24, 1024, 16, 0, 2048, 50257, 256},
      {"gpt3-760m", paper, 760e6, 24, 1536, 16, 0, 2048, 50257, 256},
      {"gpt3-1.3b", paper, 1.3e9, 24, 2048, 16, 0, 2048, 50257, 512},
      {"gpt3-2.7b", paper, 2.7e9, 32, 2560, 32, 0, 2048, 50257, 512},
      {"gpt3-6.7b", paper, 6.7e9, 32, 4096, 32, 0, 2048, 50257, 1024},
      {"gpt3-13b", paper, 13e9, 40, 5140, 40, 128, 2048, 50257, 1024},
      {"gpt3-175b", paper, 175e9, 96, 12288, 96, 0, 2048, 50257, 1536},
      // Rhino Table 1 names (global batch 64 in its full-parallelism runs); GPT-XL has 32 heads of 64.
      {"gpt-medium", "GPT-Medium (Rhino Table 1)", 350e6, 24, 1024, 16, 0, 2048, 50257, 64},
      {"gpt-large", "GPT-Large (Rhino Table 1)", 760e6, 24, 1536, 16, 0, 2048, 50257, 64},
      {"gpt-xl", "GPT-XL (Rhino Table 1)", 1.3e9, 24, 2048, 32, 0, 2048, 50257, 64},
      {"gpt-2.7b", "GPT-2.7B (Rhino Table 1)", 2.7e9, 32, 2560, 32, 0, 2048, 50257, 64},
      {"gpt-6.7b", "GPT-6.7B (Rhino Table 1)", 6.7e9, 32, 4096, 32, 0, 2048, 50257, 64},
      // SuperScaler Table 2: long-document GPT-3 at seq 16384 (LongFormer's setting), 32 heads,
      // batch 512; the learned position table grows to 16384 rows.
      {"gpt3-1.3b-16k", "GPT-3 long-sequence (SuperScaler Table 2)", 1.3e9, 24, 2048, 32, 0, 16384, 50257, 512},
      {"gpt3-2.6b-16k", "GPT-3 long-sequence (SuperScaler Table 2)", 2.6e9, 32, 2560, 32, 0, 16384, 50257, 512},
      {"gpt3-6.7b-16k", "GPT-3 long-sequence (SuperScaler Table 2)", 6.7e9, 32, 4096, 32, 0, 16384, 50257, 512},
      {"gpt3-15b-16k", "GPT-3 long-sequence (SuperScaler Table 2)", 15e9, 48, 5120, 32, 0, 16384, 50257, 512},
  };
  std::vector<ModelPreset> presets;
  for (const GptConfig& config : configs) presets.push_back(make_preset(config));
  return presets;
}

}  // namespace loom::models
