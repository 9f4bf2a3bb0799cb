// Every preset's training graph (forward, backward, optimizer) survives graph -> JSON -> graph -> JSON
// byte-identically, equals itself after the trip, and validates against the registry.
#include <gtest/gtest.h>

#include "loom/ir/autograd.h"
#include "loom/ir/graph_json.h"
#include "loom/ir/validate.h"
#include "loom/models/zoo.h"
#include "loom/ops/registry.h"

namespace loom::frontend {
namespace {

std::vector<std::string> preset_names() {
  std::vector<std::string> names;
  for (const models::ModelPreset& preset : models::model_presets()) names.push_back(preset.name);
  return names;
}

class PresetRoundTrip : public ::testing::TestWithParam<std::string> {};

TEST_P(PresetRoundTrip, JsonIsByteIdenticalAndTheGraphEqual) {
  // Batch 1 keeps the graphs cheap; the op structure does not depend on it.
  models::ModelOptions options;
  options.batch = 1;
  auto forward = models::build_model(GetParam(), options);
  ASSERT_TRUE(forward) << forward.error().to_string();
  auto graph = ir::build_training_graph(*forward, ops::builtin_ops(), {});
  ASSERT_TRUE(graph) << graph.error().to_string();
  ASSERT_TRUE(ir::validate_graph(*graph, ops::builtin_ops()));

  const std::string first = ir::graph_to_json(*graph);
  auto parsed = ir::graph_from_json(first);
  ASSERT_TRUE(parsed) << parsed.error().to_string();
  EXPECT_TRUE(*parsed == *graph);
  EXPECT_EQ(ir::graph_to_json(*parsed), first);
  auto valid = ir::validate_graph(*parsed, ops::builtin_ops());
  EXPECT_TRUE(valid) << (valid ? "" : valid.error().to_string());
}

INSTANTIATE_TEST_SUITE_P(AllPresets, PresetRoundTrip, ::testing::ValuesIn(preset_names()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param;
                           for (char& ch : name)
                             if (ch == '-' || ch == '.') ch = '_';
                           return name;
                         });

}  // namespace
}  // namespace loom::frontend
