#include "loom/models/families.h"

namespace loom::models {

std::vector<ModelPreset> swin_presets() { return {}; }

}  // namespace loom::models
