#include "loom/codegen/rank_programs.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <type_traits>

#include "../../src/codegen/buffer_names.h"
#include "testing/policy_plans.h"
#include "loom/core/sha256.h"
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
    auto p = policy_plan(shrunk_training_graph("gpt3-125m", ir::DType::f32), policy, config, /*exec_passes=*/true);
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
      // rt.keep lines report results; every other statement is one instruction (codegen only prints).
      EXPECT_EQ(body.size() - count_prefix(body, "rt.keep("), program.size());
      const auto starts = std::ranges::count_if(program, [](const exec::Instruction& in) {
        return std::holds_alternative<exec::CollectiveStart>(in);
      });
      EXPECT_EQ(starts > 0, policy != "tp");  // tp reduces no gradient over replicas
      EXPECT_EQ(count_prefix(body, "rt.all_reduce_start("), static_cast<std::size_t>(starts));
      EXPECT_EQ(count_prefix(body, "= rt.wait(bucket_"), static_cast<std::size_t>(starts));
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

// The manifest ties the files to the plan: each module's sha256 (what the launcher checks before starting),
// and a plan id that changes with the plan (here: dp 2 against tp 2, and another description).
TEST(RankPrograms, ManifestHoldsEachModulesDigestAndThePlanId) {
  auto dp = policy_plan(shrunk_training_graph("gpt3-125m", ir::DType::f32), "dp", {.dp = 2});
  auto tp = policy_plan(shrunk_training_graph("gpt3-125m", ir::DType::f32), "tp", {.tp = 2});
  Expected<RankPrograms> a = emit_rank_programs(dp->exec, "x"), b = emit_rank_programs(tp->exec, "x"),
                         c = emit_rank_programs(dp->exec, "y");
  ASSERT_TRUE(a && b && c);
  const nlohmann::json ma = nlohmann::json::parse(a->manifest), mb = nlohmann::json::parse(b->manifest),
                       mc = nlohmann::json::parse(c->manifest);
  EXPECT_EQ(ma["format"], 2);
  ASSERT_EQ(ma["rank_sha256"].size(), a->modules.size());
  for (std::size_t r = 0; r < a->modules.size(); ++r) EXPECT_EQ(ma["rank_sha256"][r], sha256_hex(a->modules[r]));
  const std::string id = ma["plan_id"];
  EXPECT_EQ(id.size(), 64u);
  EXPECT_NE(id, mb["plan_id"].get<std::string>());  // as a string: clang finds string != json ambiguous
  EXPECT_NE(id, mc["plan_id"].get<std::string>());
}

// A folded step (exec/fold.h) holds programs for class representatives only: it is its own type, which
// codegen does not take.
TEST(RankPrograms, TakeNoFoldedStep) {
  static_assert(std::is_invocable_v<decltype(&emit_rank_programs), const exec::ExecPlan&, std::string_view>);
  static_assert(!std::is_invocable_v<decltype(&emit_rank_programs), const exec::FoldedStep&, std::string_view>);
}

}  // namespace
}  // namespace loom::codegen
