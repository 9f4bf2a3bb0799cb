// Preset lists, one function per model family (one source file each, src/models/<family>.cc).
#pragma once

#include <vector>

#include "loom/models/zoo.h"

namespace loom::models {

std::vector<ModelPreset> gpt_presets();        // GPT-3 family
std::vector<ModelPreset> llama_presets();      // LLaMA 1/2/3 (GQA)
std::vector<ModelPreset> bert_presets();       // BERT (Oases), DNABERT (Rhino)
std::vector<ModelPreset> t5_presets();         // T5 (nnScaler), mBART (SuperScaler)
std::vector<ModelPreset> moe_presets();        // GShard MoE (Rhino)
std::vector<ModelPreset> swin_presets();       // Swin Transformer (nnScaler, SuperScaler)
std::vector<ModelPreset> alphafold_presets();  // AlphaFold2 Evoformer (nnScaler, SuperScaler)
std::vector<ModelPreset> resnet_presets();     // ResNet, Wide-ResNet (Rhino)
std::vector<ModelPreset> vgg_presets();        // VGG19 (Rhino)
std::vector<ModelPreset> unet_presets();       // UNet (Rhino)

}  // namespace loom::models
