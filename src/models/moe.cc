#include "loom/models/families.h"

namespace loom::models {

std::vector<ModelPreset> moe_presets() { return {}; }

}  // namespace loom::models
