// The runtime draws the initial values of loaded tensors in Python (python/loom/runtime/initial.py) with
// the generator `loom verify` uses in C++ (verify::initial_values): these golden numbers are what the
// Python generator gives (python/tests/test_runtime_geometry.py pins the same ones), so a change to
// either side breaks one of the two tests.
#include <gtest/gtest.h>

#include "testing/policy_plans.h"
#include "loom/verify/graph_interpreter.h"

namespace loom::codegen {
namespace {

TEST(InitialValues, PythonRuntimeDrawsTheSameNumbersAsVerify) {
  const ir::Graph& graph = exec::testing::shrunk_training_graph("gpt3-125m", ir::DType::f32);
  const std::vector<verify::NdArray> values = verify::initial_values(graph, 1);
  const auto named = [&](std::string_view name) -> const verify::NdArray& {
    for (const ir::FullTensor& t : graph.tensors)
      if (t.name == name) return values[t.id.index()];
    ADD_FAILURE() << "no tensor " << name;
    return values.front();
  };
  const verify::NdArray& wte = named("wte.weight");
  ASSERT_EQ(wte.data.size(), 64u * 16u);
  EXPECT_DOUBLE_EQ(wte.data[0], -0.21147801760475704);
  EXPECT_DOUBLE_EQ(wte.data[1], 0.2720064732322971);
  EXPECT_DOUBLE_EQ(wte.data[2], 0.36819606847866904);
  EXPECT_DOUBLE_EQ(wte.data.back(), -0.1549652195542246);
  const verify::NdArray& ids = named("input_ids");
  ASSERT_GE(ids.data.size(), 6u);
  const std::vector<double> first(ids.data.begin(), ids.data.begin() + 6);
  EXPECT_EQ(first, (std::vector<double>{0, 37, 12, 37, 16, 55}));
}

}  // namespace
}  // namespace loom::codegen
