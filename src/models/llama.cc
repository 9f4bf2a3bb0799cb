#include "loom/models/families.h"

namespace loom::models {

std::vector<ModelPreset> llama_presets() { return {}; }

}  // namespace loom::models
