#include "../../src/codegen/donated_inputs.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "loom/exec/instruction_buffers.h"

#include "testing/policy_plans.h"

namespace loom::codegen::detail {
namespace {

using exec::testing::policy_plan;
using exec::testing::shrunk_training_graph;

// Whether any instruction after `at` (a start included) reads buffer b.
bool read_after(const exec::ExecPlan& exec, int rank, std::size_t at, exec::BufferId b) {
  const auto& program = exec.programs[static_cast<std::size_t>(rank)];
  bool read = false;
  for (std::size_t i = at + 1; i < program.size(); ++i) exec::for_each_read(program[i], [&](exec::BufferId r) { read |= r == b; });
  return read;
}

// Over plans of every kind (dp, tp, ZeRO 1 and 3, pipelines, recompute): a donated input is an optimizer
// step's loaded parameter or state, never its gradient, read by nothing after the step, and the only load
// of its tensor on the rank. Under plain dp every parameter and state of every step is donated.
TEST(DonatedInputs, OnlyDeadLoadedInputsOfOptimizerSteps) {
  struct Case {
    std::string model, policy;
    policy::ParallelConfig config;
    bool all_donated;
  };
  const std::vector<Case> cases = {
      {"gpt3-125m", "dp", {.dp = 2}, true},
      {"gpt3-125m", "tp", {.tp = 2}, true},
      {"gpt3-125m", "zero", {.dp = 2, .zero = 1}, false},
      {"gpt3-125m", "zero", {.dp = 2, .zero = 3}, false},
      {"llama3-8b", "megatron", {.dp = 2, .tp = 2, .pp = 2, .micro_batches = 2}, false},
      {"gpt3-125m", "megatron", {.pp = 2, .micro_batches = 4, .recompute = policy::Recompute::full}, false},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.model + " " + c.policy);
    auto p = policy_plan(shrunk_training_graph(c.model, ir::DType::f32), c.policy, c.config, /*exec_passes=*/true);
    ASSERT_FALSE(p->exec.programs.empty());
    std::size_t steps = 0, donated_inputs = 0;
    for (int r = 0; r < p->exec.num_devices; ++r) {
      const auto& program = p->exec.programs[static_cast<std::size_t>(r)];
      const auto donated = donated_optimizer_inputs(p->exec, r);
      for (std::size_t i = 0; i < program.size(); ++i) {
        const auto* step = std::get_if<exec::Compute>(&program[i]);
        if (step == nullptr || p->plan.graph->op(p->plan.sub_op(step->sub_op).op).pass != ir::Pass::optimizer) {
          EXPECT_FALSE(donated.contains(i)) << "rank " << r << " instruction " << i << " is not an optimizer step";
          continue;
        }
        ++steps;
        const auto it = donated.find(i);
        if (c.all_donated) {
          ASSERT_NE(it, donated.end()) << "rank " << r << ": optimizer step at " << i << " donates nothing";
          EXPECT_EQ(it->second.size() + 1, step->inputs.size());  // all but the gradient
        }
        if (it == donated.end()) continue;
        for (int k : it->second) {
          ++donated_inputs;
          EXPECT_NE(k, 1) << "the gradient is donated";
          const exec::BufferId b = step->inputs[static_cast<std::size_t>(k)];
          EXPECT_FALSE(read_after(p->exec, r, i, b))
              << "rank " << r << ": input " << k << " of the step at " << i << " is read later";
          int loads = 0;
          for (const exec::Instruction& in : program)
            if (const auto* load = std::get_if<exec::Load>(&in))
              loads += p->exec.buffer(load->output).piece.tensor == p->exec.buffer(b).piece.tensor;
          EXPECT_EQ(loads, 1);
        }
      }
    }
    EXPECT_GT(steps, 0u);
    EXPECT_GT(donated_inputs, 0u);
  }
}

}  // namespace
}  // namespace loom::codegen::detail
