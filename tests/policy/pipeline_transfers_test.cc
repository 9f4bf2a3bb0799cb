// What crosses pipeline stages: a tied embedding's gradient from the last stage reaches the first once
// per step, summed over the micro-batches where it was produced, not once per micro-batch.
#include <gtest/gtest.h>

#include <map>

#include "../exec/policy_plans.h"

namespace loom::policy {
namespace {

using exec::testing::policy_plan;
using exec::testing::shrunk_training_graph;

TEST(PipelineTransfers, TiedEmbeddingGradientCrossesOncePerStep) {
  const ir::Graph& graph = shrunk_training_graph("gpt3-125m", ir::DType::f32);
  for (int micro_batches : {2, 4}) {
    const auto pp = policy_plan(graph, "megatron", {.pp = 2, .micro_batches = micro_batches});
    std::map<int, int> received;  // by device: recvs of the token embedding's gradient
    for (int d = 0; d < pp->exec.num_devices; ++d)
      for (const exec::Instruction& instruction : pp->exec.programs[static_cast<std::size_t>(d)])
        if (const auto* r = std::get_if<exec::Recv>(&instruction)) {
          const std::string& name = graph.tensor(pp->exec.buffer(r->buffer).piece.tensor).name;
          if (name.starts_with("wte.weight.grad")) ++received[d];
        }
    EXPECT_EQ(received[0], 1) << micro_batches << " micro-batches";
  }
}

}  // namespace
}  // namespace loom::policy
