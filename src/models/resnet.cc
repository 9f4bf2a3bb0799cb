#include "loom/models/families.h"

namespace loom::models {

std::vector<ModelPreset> resnet_presets() { return {}; }

}  // namespace loom::models
