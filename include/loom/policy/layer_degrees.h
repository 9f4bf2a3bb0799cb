// Per-layer tensor-parallel degrees (Oases §V, Table II: "[2]x8+[4]x16" on 4 GPUs): runs of consecutive
// layers, each at a degree that divides the job's tp group. A layer at degree t < tp runs tp / t
// data-parallel copies inside each tp group (each copy t-way tensor parallel on a batch share): its
// weights are replicated over the copies and their gradients reduced over them. The ops outside the
// numbered layers (embeddings, head, loss) keep the group's degree. Text: "DxN" runs joined by commas,
// "2x8,4x16": the first 8 layers at tp 2, the next 16 at tp 4.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "loom/core/error.h"

namespace loom::policy {

struct DegreeRun {
  int degree = 1;  // tensor-parallel degree of the run's layers
  int layers = 1;  // how many consecutive layers

  bool operator==(const DegreeRun&) const = default;
};

// Errors name the bad run and say the form: an empty text or run, a part that is not "DxN", a degree
// or count below 1.
Expected<std::vector<DegreeRun>> parse_layer_degrees(std::string_view text);
std::string to_string(std::span<const DegreeRun> runs);  // "2x8,4x16"

std::vector<int> expand(std::span<const DegreeRun> runs);       // by layer ordinal: the degree
std::vector<DegreeRun> runs_of(std::span<const int> per_layer);  // the inverse: equal neighbours merged

// Each degree must divide the tp group and the runs must cover the model's layers. Errors name the
// first bad layer's run and its degree, or the counts' sum and the layers.
Expected<void> check_layer_degrees(std::span<const int> per_layer, int tp, int layers);

}  // namespace loom::policy
