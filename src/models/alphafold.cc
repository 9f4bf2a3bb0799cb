#include "loom/models/families.h"

namespace loom::models {

std::vector<ModelPreset> alphafold_presets() { return {}; }

}  // namespace loom::models
