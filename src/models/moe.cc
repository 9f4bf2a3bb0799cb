// GShard MoE language model (Lepikhin et al. 2020) in the configurations Rhino Table 2 runs (the
// same as Alpa's MoE benchmark). A GPT-style decoder (learned positions, pre-LN, causal attention,
// biases, tied LM head) in which every other FFN, the odd layers 1, 3, 5, ..., is a mixture of
// experts with top-2 gating.
//
// MoE layer (GShard Algorithm 2): each sequence is one group (g = batch, t = seq); moe_gate with
// gate weight [E h] gives the combine weights and the dispatch mask [g t E c]; moe_dispatch gathers
// [E g c h]; every expert is wi [h f], ReLU, wo [f h], written as einsums over per-expert weights
// [E h f] / [E f h] without biases, as in GShard; moe_combine returns [g t h]. Expert capacity with
// capacity factor 1.0 is GShard's 2·t/E for top-2, i.e. c = ceil(top_k · t / E).
// The auxiliary load-balancing loss is left out (it has no parameters and negligible FLOPs).
//
// Vocabulary 32000 and seq 1024 follow Alpa's benchmark; with them the parameter counts land
// within 4 % of the names (see moe_test.cc). Parameters, per dense layer 4·h² + 4·h (attention)
// + 2·h·f + f + h (MLP) + 4·h (norms); per MoE layer 4·h² + 4·h + E·h (gate) + 2·E·h·f + 4·h;
// plus V·h + S·h + 2·h.
#include <fmt/format.h>

#include "loom/models/families.h"
#include "loom/models/transformer_blocks.h"

namespace loom::models {
namespace {

struct MoeConfig {
  std::string name;
  std::string source;
  double nominal_params = 0;
  std::int64_t layers = 0;
  std::int64_t hidden = 0;
  std::int64_t ffn = 0;
  std::int64_t heads = 16;
  std::int64_t experts = 0;
  std::int64_t vocab = 32000;
  std::int64_t context = 1024;  // rows of the learned position table
  std::int64_t seq = 1024;      // default sequence length (<= context)
  std::int64_t batch = 256;     // Rhino's global batch for the full-parallelism runs
};

constexpr std::int64_t kTopK = 2;  // GShard's top-2 gating
constexpr double kDropout = 0.1;
constexpr double kLayerNormEps = 1e-5;

std::int64_t expert_capacity(std::int64_t tokens_per_group, std::int64_t experts) {
  return (kTopK * tokens_per_group + experts - 1) / experts;
}

// x [b s h] -> [b s h] through `experts` expert FFNs, in the current scope.
ir::TensorId moe_ffn(ir::GraphBuilder& b, ir::TensorId x, const MoeConfig& config, std::int64_t seq, ir::DType dtype) {
  const std::int64_t h = config.hidden, f = config.ffn, e = config.experts;
  const ir::TensorId gate_weight = b.parameter("gate.weight", {e, h}, dtype);
  const std::vector<ir::TensorId> routing =
      b.ops("moe_gate", "gate", {x, gate_weight},
            ir::Attrs{{"top_k", kTopK}, {"capacity", expert_capacity(seq, e)}});
  if (!b.ok() || routing.size() != 2) return {};
  const ir::TensorId combine = routing[0], dispatch = routing[1];
  const ir::TensorId dispatched = b.op("moe_dispatch", "dispatch", {x, dispatch});
  const ir::TensorId wi = b.parameter("experts.wi", {e, h, f}, dtype);
  const ir::TensorId wo = b.parameter("experts.wo", {e, f, h}, dtype);
  const ir::TensorId inner =
      b.op("einsum", "experts.fc1", {dispatched, wi}, ir::Attrs{{"equation", std::string("egch,ehf->egcf")}});
  const ir::TensorId act = b.op("relu", "experts.act", {inner});
  const ir::TensorId out =
      b.op("einsum", "experts.fc2", {act, wo}, ir::Attrs{{"equation", std::string("egcf,efh->egch")}});
  return dropout(b, "dropout", b.op("moe_combine", "combine", {out, combine}), kDropout);
}

// The verification-sized MoE (ModelOptions::shrink): a dense layer and an expert layer.
MoeConfig shrink(MoeConfig config) {
  using Tiny = TinyTransformer;
  config.layers = Tiny::layers;  // layer 0 dense, layer 1 the mixture of experts
  config.hidden = Tiny::hidden;
  config.heads = Tiny::heads;
  config.ffn = 2 * Tiny::hidden;  // the presets use 8 x hidden; 2 x keeps the experts small
  config.experts = 4;             // divisible by expert-parallel degrees 2 and 4; capacity 2·8/4 = 4 slots
  config.vocab = Tiny::vocab;
  config.context = config.seq = Tiny::seq;
  config.batch = Tiny::batch;
  return config;
}

Expected<ir::Graph> build_moe(const MoeConfig& preset, const ModelOptions& options, const ir::OpCatalog& catalog) {
  const MoeConfig config = options.shrink ? shrink(preset) : preset;
  const StepShape step = resolve_step_shape(options, config.batch, config.seq, config.layers);
  if (step.layers < 2)
    return fail(fmt::format("{} needs at least 2 layers (every other FFN is an MoE layer), got {}", config.name,
                            step.layers),
                "give layers >= 2");
  if (step.seq > config.context)
    return fail(fmt::format("seq {} exceeds the {} learned positions of {}", step.seq, config.context, config.name),
                fmt::format("use seq <= {}", config.context));
  const std::int64_t h = config.hidden;
  const ir::DType dtype = step.dtype;
  const NormSpec layer_norm{.kind = NormKind::layer_norm, .eps = kLayerNormEps, .bias = true};
  const AttentionSpec attention{.hidden = h,
                                .heads = config.heads,
                                .bias = true,
                                .fused_qkv = true,
                                .causal = true,
                                .dropout = kDropout,
                                .impl = options.attention};
  const MlpSpec dense{
      .hidden = h, .ffn = config.ffn, .activation = Activation::gelu, .bias = true, .dropout = kDropout};

  ir::GraphBuilder b(config.name, catalog);
  const ir::TensorId ids = b.input("input_ids", {step.batch, step.seq}, ir::DType::i64);
  const ir::TensorId labels = b.input("labels", {step.batch, step.seq}, ir::DType::i64);
  auto [x, wte] = learned_embeddings(b, ids, padded_vocab(config.vocab, options), config.context, h, kDropout, dtype);
  for (std::int64_t i = 0; i < step.layers; ++i) {
    auto layer = b.scope(fmt::format("layers.{}", i));
    const bool experts = i % 2 == 1;
    x = pre_norm_block(b, x, layer_norm, attention, dtype, experts ? "moe" : "mlp", "ffn_residual",
                       [&](ir::TensorId n) {
                         return experts ? moe_ffn(b, n, config, step.seq, dtype) : mlp(b, n, dense, dtype);
                       });
  }
  x = norm(b, "ln_f", x, h, layer_norm, dtype);
  const ir::TensorId logits = b.op("linear", "lm_head", {x, wte});
  language_model_loss(b, logits, labels);
  return std::move(b).finish();
}

Expected<ModelPreset> make_preset(const ModelSpec& spec, FieldNaming naming) {
  if (spec.layers < 2)
    return fail(fmt::format("{} {}: every other FFN is a mixture of experts, so an MoE model needs at least 2 layers",
                            field_name(SpecField::layers, naming), spec.layers),
                "give layers >= 2");
  const MoeConfig config{.name = spec.name,
                         .source = spec.source.empty() ? std::string("GShard MoE") : spec.source,
                         .nominal_params = spec.nominal_params,
                         .layers = spec.layers,
                         .hidden = spec.hidden,
                         .ffn = spec.ffn,
                         .heads = or_default(spec.heads, 16),
                         .experts = spec.experts,
                         .vocab = or_default(spec.vocab, 32000),
                         .context = or_default(spec.positions, or_default(spec.seq, 1024)),
                         .seq = or_default(spec.seq, or_default(spec.positions, 1024)),
                         .batch = or_default(spec.batch, 256)};
  return preset_from(config,
                     {.name = config.name,
                      .family = "moe",
                      .description = fmt::format("{}: L{} h{} ffn {} a{} {} experts top-2, vocab {} seq {}",
                                                 config.source, config.layers, config.hidden, config.ffn, config.heads,
                                                 config.experts, config.vocab, config.seq),
                      .nominal_params = config.nominal_params,
                      .default_batch = config.batch,
                      .default_seq = config.seq},
                     build_moe);
}

ModelSpec moe(std::string name, double nominal, std::int64_t layers, std::int64_t hidden, std::int64_t ffn,
              std::int64_t experts) {
  return {.family = "moe", .name = std::move(name), .source = "GShard MoE (Rhino Table 2)", .nominal_params = nominal,
          .layers = layers, .hidden = hidden, .heads = 16, .ffn = ffn, .vocab = 32000, .seq = 1024, .batch = 256,
          .experts = experts};
}

}  // namespace

ModelFamily moe_family() {
  return {
      .name = "moe",
      .summary = "GShard mixture of experts: a GPT-style decoder whose odd layers' FFN is top-2 routed experts",
      .fields = {{SpecField::layers, "transformer layers (>= 2; the odd ones are MoE layers)", ""},
                 {SpecField::hidden, "d_model", ""},
                 {SpecField::heads, "attention heads", "16"},
                 {SpecField::ffn, "inner width of the dense MLPs and of every expert", ""},
                 {SpecField::experts, "experts per MoE layer", ""},
                 {SpecField::vocab, "vocabulary", "32000"},
                 {SpecField::seq, "sequence length (one routing group)", "positions, else 1024"},
                 {SpecField::positions, "learned position rows", "seq"},
                 {SpecField::batch, "global batch (sequences)", "256"}},
      .heads_split_hidden = true,
      .make = make_preset,
      // Rhino Table 2: 16 heads throughout (d_head 48 / 64 / 96).
      .presets = {moe("moe-380m", 380e6, 8, 768, 6144, 8), moe("moe-760m", 760e6, 16, 768, 6144, 8),
                  moe("moe-1.3b", 1.3e9, 16, 768, 6144, 16), moe("moe-2.4b", 2.4e9, 16, 1024, 8192, 16),
                  moe("moe-10b", 10e9, 16, 1536, 12288, 32)},
  };
}

}  // namespace loom::models
