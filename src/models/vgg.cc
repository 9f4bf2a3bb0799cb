#include "loom/models/families.h"

namespace loom::models {

std::vector<ModelPreset> vgg_presets() { return {}; }

}  // namespace loom::models
