#include "loom/models/families.h"

namespace loom::models {

std::vector<ModelPreset> bert_presets() { return {}; }

}  // namespace loom::models
