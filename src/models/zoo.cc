#include "loom/models/zoo.h"

#include <algorithm>
#include <cassert>

#include "loom/models/families.h"
#include "loom/ops/registry.h"

namespace loom::models {

const std::vector<ModelPreset>& model_presets() {
  // Each preset is a spec built through its family, as a model file or the --arch flags are: a preset that
  // fails its own checks is a bug here, caught by every test that lists the presets.
  static const std::vector<ModelPreset> presets = [] {
    std::vector<ModelPreset> all;
    for (const ModelFamily& family : model_families())
      for (const ModelSpec& spec : family.presets) {
        Expected<ModelPreset> preset = preset_of(spec, FieldNaming::file_key);
        assert(preset && "a preset's spec fails its family's checks");
        if (preset) all.push_back(std::move(*preset));
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

std::string_view name(AttentionImpl impl) {
  switch (impl) {
    case AttentionImpl::fused: return "fused";
    case AttentionImpl::eager: return "eager";
    case AttentionImpl::eager_fp32_softmax: return "eager-fp32";
  }
  return "fused";
}

Expected<AttentionImpl> parse_attention_impl(std::string_view text) {
  for (AttentionImpl impl : {AttentionImpl::fused, AttentionImpl::eager, AttentionImpl::eager_fp32_softmax})
    if (text == name(impl)) return impl;
  return fail(fmt::format("unknown attention '{}'", text),
              "use fused (one flash-style kernel), eager (scores, softmax and dropout as separate ops) or eager-fp32 "
              "(eager with the softmax in fp32, as Megatron-LM v3 above 4096 keys)");
}

Expected<ir::Graph> build_model(std::string_view name, const ModelOptions& options) {
  const ModelPreset* preset = find_preset(name);
  if (preset == nullptr) return fail(fmt::format("unknown model preset '{}'", name), "`loom models` lists the presets");
  return build_model(*preset, options);
}

Expected<ir::Graph> build_model(const ModelPreset& preset, const ModelOptions& options) {
  const std::string& name = preset.name;
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
  const ModelFamily* family = find_family(preset.family);
  const bool has_vocabulary = family != nullptr && family->find(SpecField::vocab) != nullptr;
  if (options.vocab > 0 && !has_vocabulary)
    return fail(fmt::format("model '{}' ({}) has no token vocabulary to replace with {}", name, preset.family,
                            options.vocab),
                "drop --vocab; it applies to the language-model presets (gpt, llama, bert, moe, t5, mbart)");
  // The families built on transformer_blocks' attention (heads, or Swin's windows).
  const bool has_attention = has_vocabulary || preset.family == "swin";
  if (options.attention != AttentionImpl::fused && !has_attention)
    return fail(fmt::format("model '{}' ({}) has no scaled dot-product attention to build eagerly", name,
                            preset.family),
                fmt::format("drop --attention {}; it applies to gpt, llama, bert, moe, t5, mbart and swin",
                            models::name(options.attention)));
  if (!ir::is_floating(options.dtype))
    return fail(fmt::format("model '{}': dtype {} is not a floating type", name, ir::name(options.dtype)),
                "use bf16, f16 or f32");
  return with_context(preset.build(options, ops::builtin_ops()), fmt::format("model '{}'", name));
}

}  // namespace loom::models
