#include "loom/models/families.h"

namespace loom::models {

std::vector<ModelPreset> gpt_presets() { return {}; }

}  // namespace loom::models
