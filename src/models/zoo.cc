#include "loom/models/zoo.h"

#include <algorithm>

#include "loom/models/families.h"
#include "loom/ops/registry.h"

namespace loom::models {

const std::vector<ModelPreset>& model_presets() {
  static const std::vector<ModelPreset> presets = [] {
    std::vector<ModelPreset> all;
    for (auto family : {gpt_presets, llama_presets, bert_presets, t5_presets, moe_presets, swin_presets,
                        alphafold_presets, resnet_presets, vgg_presets, unet_presets}) {
      std::vector<ModelPreset> part = family();
      all.insert(all.end(), std::make_move_iterator(part.begin()), std::make_move_iterator(part.end()));
    }
    return all;
  }();
  return presets;
}

const ModelPreset* find_preset(std::string_view name) {
  for (const ModelPreset& preset : model_presets())
    if (preset.name == name) return &preset;
  return nullptr;
}

std::int64_t padded_vocab(std::int64_t vocab, const ModelOptions& options) {
  if (options.shrink) return vocab;
  if (options.vocab > 0) vocab = options.vocab;
  if (options.vocab_multiple <= 1) return vocab;
  return (vocab + options.vocab_multiple - 1) / options.vocab_multiple * options.vocab_multiple;
}

std::string_view name(AttentionImpl impl) { return impl == AttentionImpl::eager ? "eager" : "fused"; }

Expected<AttentionImpl> parse_attention_impl(std::string_view text) {
  if (text == "fused") return AttentionImpl::fused;
  if (text == "eager") return AttentionImpl::eager;
  return fail(fmt::format("unknown attention '{}'", text),
              "use fused (one flash-style kernel) or eager (scores, softmax and dropout as separate ops)");
}

Expected<ir::Graph> build_model(std::string_view name, const ModelOptions& options) {
  const ModelPreset* preset = find_preset(name);
  if (preset == nullptr) return fail(fmt::format("unknown model preset '{}'", name), "`loom models` lists the presets");
  if (options.batch < 0 || options.seq < 0 || options.layers < 0 || options.vocab < 0)
    return fail(fmt::format("model '{}': batch, seq and layers must be positive (0 keeps the preset's default)", name));
  // Bounds that keep a build finite: no real training step is this large, and past them the
  // graph would take minutes and gigabytes to build.
  if (options.layers > kMaxLayers)
    return fail(fmt::format("model '{}': {} layers is over Loom's limit of {}", name, options.layers, kMaxLayers));
  if (options.batch > kMaxBatchOrSeq || options.seq > kMaxBatchOrSeq)
    return fail(fmt::format("model '{}': batch {} or seq {} is over Loom's limit of {}", name, options.batch, options.seq,
                            kMaxBatchOrSeq));
  if (options.vocab_multiple < 1 || options.vocab_multiple > 65536)
    return fail(fmt::format("model '{}': a vocabulary multiple of {}", name, options.vocab_multiple),
                "pad the vocabulary to a multiple between 1 (no padding) and 65536; Megatron-LM uses 128");
  // Language models only: a vision or protein preset has no token table, and a vocabulary it would ignore
  // must not look accepted.
  static constexpr std::string_view kWithVocabulary[] = {"gpt", "llama", "bert", "moe", "t5", "mbart"};
  if (options.vocab > 0 && std::ranges::find(kWithVocabulary, preset->family) == std::end(kWithVocabulary))
    return fail(fmt::format("model '{}' ({}) has no token vocabulary to replace with {}", name, preset->family,
                            options.vocab),
                "drop --vocab; it applies to the language-model presets (gpt, llama, bert, moe, t5, mbart)");
  static constexpr std::string_view kWithAttention[] = {"gpt", "llama", "bert", "moe", "t5", "mbart", "swin"};
  if (options.attention == AttentionImpl::eager &&
      std::ranges::find(kWithAttention, preset->family) == std::end(kWithAttention))
    return fail(fmt::format("model '{}' ({}) has no scaled dot-product attention to build eagerly", name,
                            preset->family),
                "drop --attention eager; it applies to gpt, llama, bert, moe, t5, mbart and swin");
  if (!ir::is_floating(options.dtype))
    return fail(fmt::format("model '{}': dtype {} is not a floating type", name, ir::name(options.dtype)),
                "use bf16, f16, f32 or f64");
  return with_context(preset->build(options, ops::builtin_ops()), fmt::format("model '{}'", name));
}

}  // namespace loom::models
