#include "loom/codegen/rank_programs.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "../../src/codegen/buffer_names.h"
#include "../../src/codegen/gradient_buckets.h"
#include "testing/policy_plans.h"
#include "loom/core/strings.h"

namespace loom::codegen {
namespace {

using ::testing::HasSubstr;
using exec::testing::policy_plan;
using exec::testing::shrunk_training_graph;

// The statements of step(): every line of the body that is not a comment.
std::vector<std::string> statements(const std::string& module) {
  std::vector<std::string> out;
  bool body = false;
  for (const std::string& line : split(module, '\n')) {
    if (line == "def step(rt):") body = true;
    else if (body && line.starts_with("    ") && !line.starts_with("    #")) out.push_back(line.substr(4));
  }
  return out;
}

std::size_t count_prefix(const std::vector<std::string>& lines, std::string_view needle) {
  return static_cast<std::size_t>(std::ranges::count_if(lines, [&](const std::string& l) { return l.find(needle) != std::string::npos; }));
}

TEST(PythonIdentifier, SpellsTensorNamesAsVariables) {
  EXPECT_EQ(detail::python_identifier("layers.0.mlp.fc1"), "layers_0_mlp_fc1");
  EXPECT_EQ(detail::python_identifier("layers.0.attn.qkv.split:1"), "layers_0_attn_qkv_split_1");
  EXPECT_EQ(detail::python_identifier("0.weight"), "t_0_weight");
  EXPECT_EQ(detail::python_identifier("lambda"), "lambda_");
  EXPECT_EQ(detail::python_identifier("rt"), "rt_");
  EXPECT_EQ(detail::python_identifier(""), "t_");
}

TEST(RankPrograms, OneStatementPerInstructionAndAManifestThatNamesEverything) {
  for (const auto& [policy, config] :
       std::vector<std::pair<std::string, policy::ParallelConfig>>{{"dp", {.dp = 2}}, {"tp", {.tp = 2}}, {"dp-tp", {.dp = 2, .tp = 2}}}) {
    SCOPED_TRACE(policy);
    auto p = policy_plan(shrunk_training_graph("gpt3-125m", ir::DType::f32), policy, config);
    Expected<RankPrograms> emitted = emit_rank_programs(p->exec, "test plan");
    ASSERT_TRUE(emitted) << emitted.error().to_string();
    ASSERT_EQ(emitted->modules.size(), static_cast<std::size_t>(p->exec.num_devices));
    const nlohmann::json manifest = nlohmann::json::parse(emitted->manifest);
    EXPECT_EQ(manifest["world_size"], p->exec.num_devices);
    EXPECT_EQ(manifest["loss"], "loss");
    for (int r = 0; r < p->exec.num_devices; ++r) {
      const std::string& module = emitted->modules[static_cast<std::size_t>(r)];
      EXPECT_THAT(module, HasSubstr("# plan: test plan\n"));
      const std::vector<std::string> body = statements(module);
      const auto& program = p->exec.programs[static_cast<std::size_t>(r)];
      // rt.keep lines report results, gradient buckets add an issue and a wait each (replacing the
      // reductions they hold), an exchange of parts becomes one all-reduce; every other statement is one
      // instruction.
      const detail::RankBuckets buckets = detail::plan_gradient_buckets(p->exec)[static_cast<std::size_t>(r)];
      EXPECT_EQ(body.size() - count_prefix(body, "rt.keep("),
                program.size() - buckets.skipped.size() + 2 * buckets.buckets.size() + buckets.all_reduce_at.size());
      EXPECT_EQ(count_prefix(body, "rt.all_reduce_start("), buckets.buckets.size());
      EXPECT_EQ(count_prefix(body, "= rt.wait(grad_bucket_"), buckets.buckets.size());
      std::size_t loads = 0, updated_loads = 0;
      for (const exec::Instruction& instruction : program) {
        if (const auto* compute = std::get_if<exec::Compute>(&instruction)) {
          EXPECT_TRUE(manifest["sub_ops"].contains(std::to_string(compute->sub_op.value)));
        }
        if (const auto* load = std::get_if<exec::Load>(&instruction)) {
          ++loads;
          const ir::FullTensor& t = p->exec.plan->graph->tensor(p->exec.buffer(load->output).piece.tensor);
          EXPECT_TRUE(manifest["tensors"].contains(t.name)) << t.name;
          if (t.role == ir::TensorRole::parameter || t.role == ir::TensorRole::optimizer_state) ++updated_loads;
        }
      }
      EXPECT_EQ(manifest["loads"][static_cast<std::size_t>(r)].size(), loads);
      // Every loaded parameter and optimizer state is reported where the step ends with it, plus the loss.
      EXPECT_EQ(count_prefix(body, "rt.keep("), updated_loads + count_prefix(body, "rt.keep(\"loss\""));
      EXPECT_EQ(count_prefix(body, "rt.keep(\"loss\""), 1u);
      EXPECT_THAT(module, HasSubstr(" = rt.load(\"wte.weight\", "));
      EXPECT_THAT(module, HasSubstr("= rt.compute("));
    }
    if (policy != "dp") {
      EXPECT_THAT(emitted->modules[0], HasSubstr("= rt.all_reduce("));
      EXPECT_THAT(emitted->modules[0], HasSubstr("# all-reduce of '"));
    }
  }
}

TEST(RankPrograms, SameExecPlanSameText) {
  auto p = policy_plan(shrunk_training_graph("llama3-8b", ir::DType::f32), "dp-tp", {.dp = 2, .tp = 2});
  Expected<RankPrograms> a = emit_rank_programs(p->exec, "x"), b = emit_rank_programs(p->exec, "x");
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->modules, b->modules);
  EXPECT_EQ(a->manifest, b->manifest);
}

TEST(RankPrograms, RefusesAFoldedExecPlan) {
  auto p = policy_plan(shrunk_training_graph("gpt3-125m", ir::DType::f32), "dp", {.dp = 2});
  p->exec.partial = true;
  Expected<RankPrograms> emitted = emit_rank_programs(p->exec, "x");
  ASSERT_FALSE(emitted);
  EXPECT_THAT(emitted.error().message, HasSubstr("folded"));
  EXPECT_THAT(emitted.error().hint, HasSubstr("--fold off"));
}

}  // namespace
}  // namespace loom::codegen
