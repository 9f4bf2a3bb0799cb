#include "loom/models/families.h"

namespace loom::models {

std::vector<ModelPreset> unet_presets() { return {}; }

}  // namespace loom::models
