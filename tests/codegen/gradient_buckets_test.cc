#include "../../src/codegen/gradient_buckets.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "testing/policy_plans.h"

namespace loom::codegen::detail {
namespace {

using exec::testing::policy_plan;
using exec::testing::shrunk_training_graph;

std::int64_t parameter_gradient_bytes(const exec::ExecPlan& exec, const GradientBucket& b) {
  std::int64_t bytes = 0;
  for (exec::BufferId out : b.outputs) {
    const plan::SubTensor& piece = exec.buffer(out).piece;
    const ir::FullTensor& t = exec.plan->graph->tensor(piece.tensor);
    EXPECT_EQ(t.role, ir::TensorRole::gradient) << t.name;
    EXPECT_TRUE(piece.value.is_whole()) << t.name;
    bytes += piece.numel() * ir::size_bytes(t.dtype);
  }
  return bytes;
}

// Every member issues the same buckets in the same order, each after the instruction finalizing its last
// gradient part and before the first of its reductions stood; the buckets replace every parameter-gradient
// all-reduce of a data-parallel plan.
TEST(GradientBuckets, DataParallelGradientsGoIntoAgreedOverlappedBuckets) {
  for (const auto& [model, dp] : std::vector<std::pair<std::string, int>>{{"gpt3-125m", 2}, {"llama3-8b", 4}}) {
    SCOPED_TRACE(model);
    auto p = policy_plan(shrunk_training_graph(model, ir::DType::f32), "dp", {.dp = dp});
    const auto buckets = plan_gradient_buckets(p->exec);
    ASSERT_EQ(buckets.size(), static_cast<std::size_t>(dp));
    for (int r = 0; r < dp; ++r) {
      const RankBuckets& rank = buckets[static_cast<std::size_t>(r)];
      ASSERT_FALSE(rank.buckets.empty());
      const auto& program = p->exec.programs[static_cast<std::size_t>(r)];
      std::size_t gradient_all_reduces = 0;
      for (const exec::Instruction& in : program)
        if (const auto* c = std::get_if<exec::Collective>(&in);
            c != nullptr && p->exec.plan->graph->tensor(p->exec.buffer(c->output).piece.tensor).role == ir::TensorRole::gradient)
          ++gradient_all_reduces;
      std::size_t held = 0;
      for (std::size_t k = 0; k < rank.buckets.size(); ++k) {
        const GradientBucket& b = rank.buckets[k];
        const GradientBucket& on_zero = buckets[0].buckets[k];
        EXPECT_EQ(b.tensors, on_zero.tensors) << "bucket " << k << " differs between rank " << r << " and rank 0";
        EXPECT_EQ(b.group, on_zero.group);
        EXPECT_EQ(b.index, static_cast<int>(k));
        EXPECT_EQ(b.bytes, parameter_gradient_bytes(p->exec, b));
        held += b.inputs.size();
      }
      EXPECT_EQ(held, gradient_all_reduces);
      EXPECT_EQ(rank.skipped.size(), gradient_all_reduces);  // all-reduces: one instruction each
      // Issued after its inputs are written, waited before any of its outputs is read.
      std::map<int, std::size_t> issued, waited;
      for (const auto& [at, ids] : rank.issue_after)
        for (int id : ids) issued[id] = at;
      for (const auto& [at, ids] : rank.wait_before)
        for (int id : ids) waited[id] = at;
      for (std::size_t k = 0; k < rank.buckets.size(); ++k) {
        const int id = static_cast<int>(k);
        ASSERT_TRUE(issued.contains(id) && waited.contains(id));
        EXPECT_LT(issued[id], waited[id]);
        for (std::size_t i = 0; i < program.size(); ++i) {
          bool writes_input = false, reads_output = false;
          std::visit(
              [&](const auto& in) {
                using T = std::decay_t<decltype(in)>;
                if constexpr (std::is_same_v<T, exec::Compute>) {
                  for (exec::BufferId b : in.outputs) writes_input |= std::count(rank.buckets[k].inputs.begin(), rank.buckets[k].inputs.end(), b) > 0;
                  for (exec::BufferId b : in.inputs) reads_output |= std::count(rank.buckets[k].outputs.begin(), rank.buckets[k].outputs.end(), b) > 0;
                }
              },
              program[i]);
          if (writes_input) {
            EXPECT_LE(i, issued[id]);
          }
          if (reads_output) {
            EXPECT_GE(i, waited[id]);
          }
        }
      }
    }
  }
}

// DDP's assignment: a bucket takes gradients until it holds the cap (the group's first: the first cap).
TEST(GradientBuckets, BucketsCloseAtTheCap) {
  auto p = policy_plan(shrunk_training_graph("gpt3-125m", ir::DType::f32), "dp", {.dp = 2});
  for (const std::int64_t cap : {std::int64_t{1}, std::int64_t{4096}, std::int64_t{65536}, kBucketBytes}) {
    for (const std::int64_t first : {std::int64_t{1}, std::int64_t{16384}, kFirstBucketBytes}) {
      SCOPED_TRACE(::testing::Message() << "cap " << cap << " first " << first);
      const auto buckets = plan_gradient_buckets(p->exec, cap, first);
      std::size_t total = 0;
      for (std::size_t k = 0; k < buckets[0].buckets.size(); ++k) {
        const GradientBucket& b = buckets[0].buckets[k];
        total += b.inputs.size();
        const std::int64_t last = parameter_gradient_bytes(p->exec, GradientBucket{.outputs = {b.outputs.back()}});
        EXPECT_LT(b.bytes - last, k == 0 ? first : cap) << "bucket " << k << " kept taking gradients past its cap";
        if (cap == 1 && first == 1) {
          EXPECT_EQ(b.inputs.size(), 1u);
        }
      }
      EXPECT_EQ(total, plan_gradient_buckets(p->exec)[0].skipped.size());
    }
  }
}

// Under dp x tp only the data-parallel gradient reductions are bucketed, over the data-parallel groups; the
// tensor-parallel all-reduces of activations stay where the plan put them.
TEST(GradientBuckets, TensorParallelAllReducesStayInPlace) {
  auto p = policy_plan(shrunk_training_graph("gpt3-125m", ir::DType::f32), "dp-tp", {.dp = 2, .tp = 2});
  const auto buckets = plan_gradient_buckets(p->exec);
  for (int r = 0; r < p->exec.num_devices; ++r) {
    const RankBuckets& rank = buckets[static_cast<std::size_t>(r)];
    ASSERT_FALSE(rank.buckets.empty());
    std::set<std::vector<int>> groups;
    for (const GradientBucket& b : rank.buckets) groups.insert(b.group);
    EXPECT_EQ(groups.size(), 1u);
    std::size_t kept = 0;
    for (std::size_t i = 0; i < p->exec.programs[static_cast<std::size_t>(r)].size(); ++i) {
      const auto* c = std::get_if<exec::Collective>(&p->exec.programs[static_cast<std::size_t>(r)][i]);
      if (c == nullptr) continue;
      const bool activation = p->exec.plan->graph->tensor(p->exec.buffer(c->output).piece.tensor).role != ir::TensorRole::gradient;
      if (activation) {
        EXPECT_FALSE(rank.skipped.contains(i)) << "an activation's collective was bucketed";
        ++kept;
      }
    }
    EXPECT_GT(kept, 0u);
  }
}

TEST(GradientBuckets, NoneOnOneDevice) {
  auto p = policy_plan(shrunk_training_graph("gpt3-125m", ir::DType::f32), "dp", {.dp = 1});
  const auto buckets = plan_gradient_buckets(p->exec);
  ASSERT_EQ(buckets.size(), 1u);
  EXPECT_TRUE(buckets[0].buckets.empty());
  EXPECT_TRUE(buckets[0].skipped.empty());
}

}  // namespace
}  // namespace loom::codegen::detail
