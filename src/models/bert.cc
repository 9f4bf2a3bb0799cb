// BERT (Devlin et al. 2019) pre-trained with masked language modelling: word + position +
// token-type embeddings, LayerNorm; post-LN encoder blocks (x = LN(x + attn(x)), x = LN(x + mlp(x)))
// with biases and GELU MLP of 4h; the MLM head (dense h->h, GELU, LayerNorm, decoder tied to the
// word embeddings plus its own bias) over every position, and cross-entropy.
// The pooler and the next-sentence head are left out: the graph is the MLM objective alone.
//
// Parameters: V·h + P·h + T·h + 2·h (embeddings and their LayerNorm) + L·(12·h² + 13·h)
// + h² + h + 2·h + V (MLM head; the decoder weight is the word embedding).
#include <fmt/format.h>

#include "loom/models/families.h"
#include "loom/models/transformer_blocks.h"

namespace loom::models {
namespace {

struct BertConfig {
  std::string name;
  std::string source;
  double nominal_params = 0;
  std::int64_t layers = 0;
  std::int64_t hidden = 0;
  std::int64_t heads = 0;
  std::int64_t ffn = 0;              // the MLP's inner width (4 x hidden in BERT)
  std::int64_t vocab = 30522;        // WordPiece vocabulary of BERT
  std::int64_t max_positions = 512;  // rows of the learned position table
  std::int64_t seq = 512;
  std::int64_t batch = 1;
};

constexpr std::int64_t kTokenTypes = 2;  // sentence A / B
constexpr double kDropout = 0.1;         // BERT's hidden and attention dropout
constexpr double kLayerNormEps = 1e-12;  // BERT's LayerNorm epsilon

// The verification-sized BERT (ModelOptions::shrink): two post-LN layers, the MLM head kept.
BertConfig shrink(BertConfig config) {
  using Tiny = TinyTransformer;
  config.layers = Tiny::layers;
  config.hidden = Tiny::hidden;
  config.heads = Tiny::heads;
  config.ffn = 4 * Tiny::hidden;
  config.vocab = Tiny::vocab;
  config.max_positions = config.seq = Tiny::seq;
  config.batch = Tiny::batch;
  return config;  // the two token types are kept
}

Expected<ir::Graph> build_bert(const BertConfig& preset, const ModelOptions& options, const ir::OpCatalog& catalog) {
  const BertConfig config = options.shrink ? shrink(preset) : preset;
  const StepShape step = resolve_step_shape(options, config.batch, config.seq, config.layers);
  if (step.seq > config.max_positions)
    return fail(fmt::format("seq {} exceeds the {} learned positions of {}", step.seq, config.max_positions,
                            config.name),
                fmt::format("use seq <= {}", config.max_positions));
  const std::int64_t h = config.hidden, vocab = padded_vocab(config.vocab, options);
  const ir::DType dtype = step.dtype;
  const NormSpec layer_norm{.kind = NormKind::layer_norm, .eps = kLayerNormEps, .bias = true};
  const AttentionSpec attention{.hidden = h,
                                .heads = config.heads,
                                .bias = true,
                                .fused_qkv = true,
                                .causal = false,
                                .dropout = kDropout,
                                .attention_dropout = kDropout,
                                .impl = options.attention};
  const MlpSpec ffn{.hidden = h, .ffn = config.ffn, .activation = Activation::gelu, .bias = true, .dropout = kDropout};

  ir::GraphBuilder b(config.name, catalog);
  const ir::TensorId ids = b.input("input_ids", {step.batch, step.seq}, ir::DType::i64);
  const ir::TensorId token_types = b.input("token_type_ids", {step.batch, step.seq}, ir::DType::i64);
  const ir::TensorId labels = b.input("labels", {step.batch, step.seq}, ir::DType::i64);
  ir::TensorId word_table, x;
  {
    auto s = b.scope("embeddings");
    word_table = b.parameter("word.weight", {vocab, h}, dtype);
    const ir::TensorId words = b.op("embedding", "word", {ids, word_table});
    const ir::TensorId positions =
        embedding(b, "position", position_ids(b, "position_ids", step.seq), config.max_positions, h, dtype);
    const ir::TensorId types = embedding(b, "token_type", token_types, kTokenTypes, h, dtype);
    x = b.op("add", "sum_types", {b.op("add", "sum_positions", {words, positions}), types});
    x = dropout(b, "dropout", norm(b, "norm", x, h, layer_norm, dtype), kDropout);
  }
  for (std::int64_t i = 0; i < step.layers; ++i) {
    auto layer = b.scope(fmt::format("layers.{}", i));
    ir::TensorId attn_out, mlp_out;
    {
      auto s = b.scope("attn");
      attn_out = self_attention(b, x, attention, dtype);
    }
    x = norm(b, "attn_norm", b.op("add", "attn_residual", {x, attn_out}), h, layer_norm, dtype);
    {
      auto s = b.scope("mlp");
      mlp_out = mlp(b, x, ffn, dtype);
    }
    x = norm(b, "mlp_norm", b.op("add", "mlp_residual", {x, mlp_out}), h, layer_norm, dtype);
  }
  ir::TensorId logits;
  {
    auto s = b.scope("mlm");
    x = b.op("gelu", "act", {linear(b, "dense", x, h, h, /*bias=*/true, dtype)});
    x = norm(b, "norm", x, h, layer_norm, dtype);
    logits = b.op("linear", "decoder", {x, word_table, b.parameter("decoder.bias", {vocab}, dtype)});
  }
  language_model_loss(b, logits, labels);
  return std::move(b).finish();
}

Expected<ModelPreset> make_preset(const ModelSpec& spec, FieldNaming /*naming*/) {
  const BertConfig config{.name = spec.name,
                          .source = spec.source.empty() ? std::string("BERT") : spec.source,
                          .nominal_params = spec.nominal_params,
                          .layers = spec.layers,
                          .hidden = spec.hidden,
                          .heads = spec.heads,
                          .ffn = or_default(spec.ffn, 4 * spec.hidden),
                          .vocab = or_default(spec.vocab, 30522),
                          .max_positions = or_default(spec.positions, or_default(spec.seq, 512)),
                          .seq = or_default(spec.seq, or_default(spec.positions, 512)),
                          .batch = or_default(spec.batch, 1)};
  return preset_from(config,
                     {.name = config.name,
                      .family = "bert",
                      .description = fmt::format("{}: L{} h{} a{} ffn {} vocab {} seq {}", config.source,
                                                 config.layers, config.hidden, config.heads, config.ffn, config.vocab,
                                                 config.seq),
                      .nominal_params = config.nominal_params,
                      .default_batch = config.batch,
                      .default_seq = config.seq},
                     build_bert);
}

ModelSpec bert(std::string name, const char* source, double nominal, std::int64_t layers, std::int64_t hidden,
               std::int64_t heads, std::int64_t vocab, std::int64_t batch) {
  return {.family = "bert", .name = std::move(name), .source = source, .nominal_params = nominal, .layers = layers,
          .hidden = hidden, .heads = heads, .vocab = vocab, .seq = 512, .positions = 512, .batch = batch};
}

}  // namespace

ModelFamily bert_family() {
  return {
      .name = "bert",
      .summary = "encoder (BERT) trained with masked language modelling: learned positions and token types, post-LN, "
                 "GELU MLP, tied MLM head",
      .fields = {{SpecField::layers, "encoder layers", ""},
                 {SpecField::hidden, "d_model", ""},
                 {SpecField::heads, "attention heads", ""},
                 {SpecField::ffn, "MLP inner width", "4 x hidden"},
                 {SpecField::vocab, "WordPiece vocabulary", "30522"},
                 {SpecField::seq, "sequence length", "positions, else 512"},
                 {SpecField::positions, "learned position rows", "seq"},
                 {SpecField::batch, "global batch (sequences)", "1"}},
      .heads_split_hidden = true,
      .make = make_preset,
      .presets =
          {
              // Oases Table III: BERT-large h1024 L24 (global batch 256); BERT-1.3B h2048 L24 (batch 128),
              // 32 heads as in Megatron-LM's BERT 1.3B. Oases does not state the sequence length: 512.
              bert("bert-large", "BERT-large (Devlin et al. 2019; Oases Table III)", 340e6, 24, 1024, 16, 30522, 256),
              bert("bert-1.3b", "BERT-1.3B (Megatron-LM; Oases Table III)", 1.3e9, 24, 2048, 32, 30522, 128),
              // DNABERT (Ji et al. 2021): BERT-base (L12 h768 a12) over overlapping 6-mers, vocabulary
              // 4^6 + 5 special tokens = 4101, up to 512 tokens. Rhino (Table 3) names it 162M and runs 32
              // sequences per device; the DNABERT paper's architecture has about 89M parameters, and Rhino
              // gives no other sizes, so we keep the paper's architecture and report the gap.
              bert("dnabert", "DNABERT-6 (Ji et al. 2021; Rhino Table 3)", 162e6, 12, 768, 12, 4101, 32),
          },
  };
}

}  // namespace loom::models
