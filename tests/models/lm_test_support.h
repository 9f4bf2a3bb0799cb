// Helpers shared by the language-model zoo tests, over their tables of preset shapes.
#pragma once

#include <cstdint>
#include <cstdio>

#include "model_test_support.h"

namespace loom::models::testing {

// Prints a preset's parameter count against the count its name gives and returns the relative gap.
inline double report_gap(const ModelPreset& preset, std::int64_t count) {
  const double gap = relative_gap(static_cast<double>(count), preset.nominal_params);
  std::printf("%s: %lld parameters, %+.2f%% from the nominal %.3g\n", preset.name.c_str(),
              static_cast<long long>(count), 100 * gap, preset.nominal_params);
  return gap;
}

// Every preset named in `shapes` (rows with a .name) builds at 2 layers, validates and differentiates.
template <class Shapes>
void expect_presets_valid_for_training(const Shapes& shapes) {
  for (const auto& s : shapes) {
    SCOPED_TRACE(s.name);
    expect_valid_for_training(build_or_fail(s.name, {.batch = 2, .seq = 16, .layers = 2}));
  }
}

}  // namespace loom::models::testing
