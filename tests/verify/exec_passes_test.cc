// The exec passes (exec/passes.h) keep what a plan computes: policies' plans run by the interpreter equal
// the single-device step before and after the passes (gradient buckets, exchanges made all-reduces,
// ZeRO-3's parameter gathers prefetched, Oases' partial sums started, hierarchical chains whole), and the
// two runs agree on every value.
#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include <gtest/gtest.h>

#include "loom/exec/check.h"
#include "testing/policy_plans.h"
#include "loom/verify/exec_interpreter.h"
#include "loom/verify/graph_interpreter.h"

namespace loom::verify {
namespace {

using exec::testing::policy_plan;
using exec::testing::shrunk_training_graph;

void expect_same_step(const ir::Graph& graph, exec::ExecPlan& exec, bool expect_change,
                      const exec::ExecPassOptions& options = {}) {
  const std::vector<NdArray> initial = initial_values(graph, 3);
  const auto reference = run_graph(graph, initial);
  ASSERT_TRUE(reference) << reference.error().to_string();
  const auto before = run_exec_plan(exec, initial);
  ASSERT_TRUE(before) << before.error().to_string();
  const exec::ExecPassStats stats = exec::run_exec_passes(exec, options);
  EXPECT_EQ(stats != exec::ExecPassStats{}, expect_change);
  ASSERT_TRUE(exec::check_exec_plan(exec)) << exec::check_exec_plan(exec).error().to_string();
  const auto after = run_exec_plan(exec, initial);
  ASSERT_TRUE(after) << after.error().to_string();
  const auto to_reference = compare_runs(graph, *reference, after->values);
  ASSERT_TRUE(to_reference) << to_reference.error().to_string();
  EXPECT_LT(to_reference->overall.max_rel, 1e-9) << to_reference->overall.worst;
  const auto to_before = compare_runs(graph, before->values, after->values);
  ASSERT_TRUE(to_before) << to_before.error().to_string();
  EXPECT_LT(to_before->overall.max_rel, 1e-12) << to_before->overall.worst;
}

TEST(ExecPasses, KeepWhatPoliciesPlansCompute) {
  struct Case {
    std::string model, policy;
    policy::ParallelConfig config;
    bool changes;
  };
  const std::vector<Case> cases = {
      {"gpt3-125m", "dp", {.dp = 2}, true},
      {"gpt3-125m", "dp-tp", {.dp = 2, .tp = 2}, true},
      {"gpt3-125m", "megatron", {.dp = 2, .pp = 2, .micro_batches = 2}, true},
      {"gpt3-125m", "zero", {.dp = 2, .zero = 1}, false},
      {"gpt3-125m", "zero", {.dp = 2, .zero = 3}, true},
      {"llama3-8b", "megatron", {.dp = 2, .tp = 2, .sequence_parallel = true}, true},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.model + " " + c.policy);
    const ir::Graph& graph = shrunk_training_graph(c.model, ir::DType::f32);
    auto p = policy_plan(graph, c.policy, c.config);
    expect_same_step(graph, p->exec, c.changes);
  }
}

// ZeRO-3 with its parameter gathers started one, two or three ahead of their readers: with gradient
// accumulation, on LLaMA, on 4 ranks, inside Megatron's dp x tp.
TEST(ExecPasses, KeepWhatPrefetchedZeroThreePlansCompute) {
  struct Case {
    std::string model, policy;
    policy::ParallelConfig config;
    int depth;
  };
  const std::vector<Case> cases = {
      {"gpt3-125m", "zero", {.dp = 2, .micro_batches = 2, .zero = 3}, 1},
      {"llama3-8b", "zero", {.dp = 2, .zero = 3}, 2},
      {"gpt3-125m", "zero", {.dp = 4, .zero = 3, .recompute = policy::Recompute::full}, 3},
      {"llama3-8b", "megatron", {.dp = 2, .tp = 2, .micro_batches = 2, .zero = 3}, 1},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << c.model << " " << c.policy << " depth " << c.depth);
    const ir::Graph& graph = shrunk_training_graph(c.model, ir::DType::f32);
    auto p = policy_plan(graph, c.policy, c.config);
    expect_same_step(graph, p->exec, true, {.prefetch_depth = c.depth});
    std::size_t starts = 0;
    for (const auto& program : p->exec.programs)
      for (const exec::Instruction& in : program)
        if (const auto* s = std::get_if<exec::CollectiveStart>(&in)) starts += s->kind == comm::Primitive::all_gather;
    EXPECT_GT(starts, 0u);
  }
}

// The general fallback's exchanges (sends and combines) made all-reduces, then bucketed.
TEST(ExecPasses, KeepWhatExchangesCompute) {
  const ir::Graph& graph = shrunk_training_graph("gpt3-125m", ir::DType::f32);
  auto p = policy_plan(graph, "dp-tp", {.dp = 2, .tp = 2}, /*exec_passes=*/false, /*layout_search=*/false);
  expect_same_step(graph, p->exec, true);
}

// overlap_collectives on hierarchical reductions: over the RTX 3090 bridge (local GPUs 0-1 and 2-3
// NVLinked, PCIe between), the layout search sums a tp-4 activation as reduce-scatter in each pair,
// all-reduce across, all-gather in each pair. The pass keeps the chain's collectives (so its cost): each
// all-reduce across becomes a start with compute before its wait, the reduce-scatters and all-gathers
// stay blocking, every collective keeps its kind, group and tag, and the step is unchanged.
TEST(ExecPasses, OverlapKeepsHierarchicalChains) {
  for (const char* model : {"gpt3-125m", "llama3-8b"}) {
    SCOPED_TRACE(model);
    const ir::Graph& graph = shrunk_training_graph(model, ir::DType::f32);
    api::JobOptions options = api::with_config({.policy = "megatron"}, {.tp = 4, .overlap = policy::Overlap::oases});
    options.layout_cluster = "rtx3090-nvlink";
    options.exec_passes = false;
    auto p = policy_plan(graph, options);
    using Call = std::tuple<comm::Primitive, std::vector<int>, std::int64_t>;
    const auto calls = [&] {
      std::multiset<Call> out;
      for (const auto& program : p->exec.programs)
        for (const exec::Instruction& in : program) {
          if (const auto* c = std::get_if<exec::Collective>(&in)) out.emplace(c->kind, c->group, c->tag);
          if (const auto* s = std::get_if<exec::CollectiveStart>(&in)) out.emplace(s->kind, s->group, s->tag);
        }
      return out;
    };
    const std::multiset<Call> blocking = calls();
    ASSERT_TRUE(std::ranges::any_of(blocking, [](const Call& c) { return std::get<0>(c) == comm::Primitive::reduce_scatter; }));
    expect_same_step(graph, p->exec, true, {.overlap_collectives = true});
    EXPECT_EQ(calls(), blocking);
    // Every chain is started whole: the reduce-scatter inside the NVLink pair right after the writer, the
    // all-reduce across the pairs reading its output and the all-gather reading the all-reduce's (chained
    // starts), each waited for after some compute.
    std::map<comm::Primitive, std::size_t> starts;
    for (const auto& program : p->exec.programs) {
      std::map<std::uint32_t, comm::Primitive> started;  // by buffer: the kind of the start writing it
      for (std::size_t i = 0; i < program.size(); ++i) {
        if (const auto* c = std::get_if<exec::Collective>(&program[i])) {
          EXPECT_FALSE(c->kind == comm::Primitive::reduce_scatter || c->kind == comm::Primitive::all_gather)
              << "a chain's " << comm::name(c->kind) << " #" << c->tag << " left blocking";
        }
        const auto* s = std::get_if<exec::CollectiveStart>(&program[i]);
        if (s == nullptr) continue;
        ++starts[s->kind];
        ASSERT_EQ(s->inputs.size(), 1u);
        const auto in = started.find(s->inputs.front().value);
        const bool across = s->group == (std::vector<int>{0, 2}) || s->group == (std::vector<int>{1, 3});
        const bool inside = s->group == (std::vector<int>{0, 1}) || s->group == (std::vector<int>{2, 3});
        if (s->kind == comm::Primitive::reduce_scatter) {
          EXPECT_TRUE(inside);
          EXPECT_EQ(in, started.end());  // reads the writer's partial sum
        } else if (s->kind == comm::Primitive::all_reduce) {
          EXPECT_TRUE(across);
          ASSERT_NE(in, started.end());
          EXPECT_EQ(in->second, comm::Primitive::reduce_scatter);
        } else {
          EXPECT_TRUE(inside);
          ASSERT_NE(in, started.end());
          EXPECT_EQ(in->second, comm::Primitive::all_reduce);
        }
        started.emplace(s->outputs.front().value, s->kind);
        const auto wait = std::find_if(program.begin() + static_cast<std::ptrdiff_t>(i), program.end(), [&](const auto& in) {
          const auto* w = std::get_if<exec::CollectiveWait>(&in);
          return w != nullptr && w->tag == s->tag;
        });
        ASSERT_NE(wait, program.end());
        EXPECT_TRUE(std::any_of(program.begin() + static_cast<std::ptrdiff_t>(i), wait,
                                [](const auto& in) { return std::holds_alternative<exec::Compute>(in); }));
      }
    }
    // 13 activation reductions x 2 sub-batches, on each of the 4 ranks, each a chain of three
    for (comm::Primitive kind : {comm::Primitive::reduce_scatter, comm::Primitive::all_reduce, comm::Primitive::all_gather})
      EXPECT_EQ(starts[kind], 4u * 26u) << comm::name(kind);
  }
}

}  // namespace
}  // namespace loom::verify
