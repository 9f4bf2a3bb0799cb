#include "loom/models/families.h"

namespace loom::models {

std::vector<ModelPreset> t5_presets() { return {}; }

}  // namespace loom::models
