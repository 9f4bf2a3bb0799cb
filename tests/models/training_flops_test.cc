// Training FLOPs of the built step graph (forward + backward, as costed op by op) against the
// standard estimate 6·N·T + 12·L·h·s·T (REFERENCE.md, "Formulas"): N the parameters that take part
// in matmuls, T tokens per step, the second term the attention score and value matmuls.
#include <gtest/gtest.h>

#include "loom/ir/autograd.h"
#include "loom/ir/graph_stats.h"
#include "loom/models/zoo.h"
#include "loom/ops/registry.h"

namespace loom::models {
namespace {

struct FlopsCase {
  const char* preset;
  std::int64_t layers;
  std::int64_t hidden;
  std::int64_t seq;
  // Parameters that feed no matmul: an untied input embedding table is only gathered from.
  std::int64_t lookup_only_params;
};

class TrainingFlops : public ::testing::TestWithParam<FlopsCase> {};

TEST_P(TrainingFlops, ForwardPlusBackwardMatchSixNTPlusAttention) {
  const FlopsCase& c = GetParam();
  ModelOptions options;
  options.batch = 1;
  options.seq = c.seq;
  auto forward = build_model(c.preset, options);
  ASSERT_TRUE(forward) << forward.error().to_string();
  auto training = ir::build_training_graph(*forward, ops::builtin_ops(), {});
  ASSERT_TRUE(training) << training.error().to_string();
  auto stats = ir::compute_stats(*training, ops::builtin_ops());
  ASSERT_TRUE(stats) << stats.error().to_string();

  const double tokens = static_cast<double>(c.seq);
  const double n = static_cast<double>(stats->parameter_count - c.lookup_only_params);
  const double estimate = 6.0 * n * tokens + 12.0 * static_cast<double>(c.layers * c.hidden * c.seq) * tokens;
  const double measured = stats->flops[0] + stats->flops[1];
  const double gap = measured / estimate - 1.0;
  RecordProperty("relative_gap", std::to_string(gap));
  EXPECT_LT(std::abs(gap), 0.01) << c.preset << ": measured " << measured << " estimate " << estimate << " gap " << gap;
  // The backward pass costs twice the forward for matmul-dominated models.
  EXPECT_NEAR(stats->flops[1] / stats->flops[0], 2.0, 0.02) << c.preset;
}

INSTANTIATE_TEST_SUITE_P(
    Presets, TrainingFlops,
    ::testing::Values(FlopsCase{"gpt3-125m", 12, 768, 2048, 0}, FlopsCase{"gpt3-350m", 24, 1024, 2048, 0},
                      FlopsCase{"gpt3-760m", 24, 1536, 2048, 0}, FlopsCase{"gpt3-1.3b", 24, 2048, 2048, 0},
                      FlopsCase{"gpt3-2.7b", 32, 2560, 2048, 0}, FlopsCase{"gpt3-6.7b", 32, 4096, 2048, 0},
                      // gpt3-13b: the residual stream is 5140 wide but attention is 40 heads x 128 = 5120.
                      FlopsCase{"gpt3-13b", 40, 5120, 2048, 0}, FlopsCase{"gpt3-175b", 96, 12288, 2048, 0},
                      FlopsCase{"llama-7b", 32, 4096, 2048, 32000LL * 4096},
                      FlopsCase{"llama2-70b", 80, 8192, 4096, 32000LL * 8192},
                      FlopsCase{"llama3-8b", 32, 4096, 8192, 128256LL * 4096}),
    [](const ::testing::TestParamInfo<FlopsCase>& info) {
      std::string name = info.param.preset;
      for (char& ch : name)
        if (ch == '-' || ch == '.') ch = '_';
      return name;
    });

}  // namespace
}  // namespace loom::models
