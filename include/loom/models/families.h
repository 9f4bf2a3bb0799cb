// The model families: each one's fields, defaults and builder, and its presets as ModelSpecs (one source
// file per family, src/models/<family>.cc). A spec from a model file, the --arch flags or a preset reaches
// a graph through the same family builder (preset_of, zoo.h).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "loom/models/model_spec.h"
#include "loom/models/zoo.h"

namespace loom::models {

// One field a family takes.
struct FamilyField {
  SpecField field;
  std::string_view meaning;       // what it is in this family: "MSA channels c_m"
  std::string_view default_text;  // the value when left out ("4 x hidden"); "": the field is required
};

struct ModelFamily {
  std::string_view name;     // "gpt"
  std::string_view summary;  // "decoder-only transformer, learned positions, GELU MLP (GPT-2/3)"
  std::vector<FamilyField> fields;
  // Whether `heads` must divide `hidden` (attention width = hidden) unless `head_dim` is given.
  bool heads_split_hidden = false;
  // The preset of a spec of this family whose fields check_spec has accepted: the family's defaults
  // filled in, the description written, build() bound. Errors are those only the family can see.
  Expected<ModelPreset> (*make)(const ModelSpec& spec, FieldNaming naming) = nullptr;
  std::vector<ModelSpec> presets;  // the zoo's presets of this family, in size order

  const FamilyField* find(SpecField field) const;
};

// Every family, in the zoo's order; find_family's nullptr means unknown.
const std::vector<ModelFamily>& model_families();
const ModelFamily* find_family(std::string_view name);
std::vector<std::string> family_names();  // in model_families()' order

// Checks a spec against its family without building it: a known family; every given field one the
// family takes, positive and within Loom's limits; the required ones given; heads dividing hidden,
// kv_heads dividing heads, seq within the positions. Errors name the field (as `naming` says) and the fix.
Expected<void> check_spec(const ModelSpec& spec, FieldNaming naming);

ModelFamily gpt_family();        // GPT-3 family
ModelFamily llama_family();      // LLaMA 1/2/3 (GQA)
ModelFamily bert_family();       // BERT (Oases), DNABERT (Rhino)
ModelFamily t5_family();         // T5 (nnScaler)
ModelFamily mbart_family();      // mBART (SuperScaler)
ModelFamily moe_family();        // GShard MoE (Rhino)
ModelFamily swin_family();       // Swin Transformer (nnScaler, SuperScaler)
ModelFamily alphafold_family();  // AlphaFold2 Evoformer (nnScaler, SuperScaler)
ModelFamily resnet_family();     // ResNet, Wide-ResNet (Rhino)
ModelFamily vgg_family();        // VGG19 (Rhino)
ModelFamily unet_family();       // UNet (Rhino)

// `value`, or `fallback` where it is not given (0).
inline std::int64_t or_default(std::int64_t value, std::int64_t fallback) { return value > 0 ? value : fallback; }
inline double or_default(double value, double fallback) { return value > 0 ? value : fallback; }

}  // namespace loom::models
